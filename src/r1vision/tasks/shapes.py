"""Coloured shapes the synthetic generators draw (``color`` images, ``motion`` clips)."""

from __future__ import annotations

from PIL import ImageDraw

COLORS = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (235, 210, 20),
    "purple": (140, 50, 170),
    "orange": (245, 140, 20),
}
SHAPES = ("circle", "square", "triangle")


def draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], fill: tuple[int, int, int]
):
    """Draw ``shape`` filling ``box`` (x1, y1, x2, y2)."""
    x1, y1, x2, y2 = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([((x1 + x2) // 2, y1), (x2, y2), (x1, y2)], fill=fill)
