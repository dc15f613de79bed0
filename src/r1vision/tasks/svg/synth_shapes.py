"""Shape figures small enough for a tiny model to learn on a CPU (the ``demo`` preset of the synthesiser).

One or two filled shapes (rect, circle, ellipse; red, green or blue) in the cells of a 3x3 grid on a small
white canvas (at 84 px a cell is one 28 px vision patch, as in the scene-graph demo), written as short SVG
with integer coordinates. ``exclude`` colour-shape pairs (``"red
circle"``) are drawn at ``exclude_rate`` x their natural rate (1.0: never); with ``require`` every figure has
one of those pairs (the out-of-distribution split).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

COLOURS = {"red": "#C44E52", "green": "#55A868", "blue": "#4C72B0"}
SHAPES = ("rect", "circle", "ellipse")


def _check_pairs(pairs: Sequence[str], what: str) -> None:
    for p in pairs:
        colour, _, shape = p.partition(" ")
        if colour not in COLOURS or shape not in SHAPES:
            raise ValueError(
                f"{what}: {p!r} is not '<colour> <shape>' with colour in {sorted(COLOURS)} and "
                f"shape in {list(SHAPES)}"
            )


def shape_svg(shape: str, colour: str, cx: int, cy: int, a: int, b: int) -> str:
    """One element centred at (cx, cy) with half-sizes ``a`` (x) and ``b`` (y)."""
    fill = COLOURS[colour]
    if shape == "rect":
        return f'<rect x="{cx - a}" y="{cy - b}" width="{2 * a}" height="{2 * b}" fill="{fill}"/>'
    if shape == "circle":
        return f'<circle cx="{cx}" cy="{cy}" r="{a}" fill="{fill}"/>'
    return f'<ellipse cx="{cx}" cy="{cy}" rx="{a}" ry="{b}" fill="{fill}"/>'


def shapes_figure(
    rng: random.Random,
    size: int = 84,
    exclude: Sequence[str] = (),
    exclude_rate: float = 1.0,
    require: Sequence[str] = (),
) -> tuple[str, int, int]:
    """One figure: (svg text, width, height)."""
    _check_pairs(exclude, "exclude")
    _check_pairs(require, "require")
    if not 0.0 <= exclude_rate <= 1.0:
        raise ValueError(f"exclude_rate must be in [0, 1], got {exclude_rate}")
    pairs = [f"{c} {s}" for c in COLOURS for s in SHAPES]
    weights = [(1.0 - exclude_rate) if p in exclude else 1.0 for p in pairs]
    count = rng.randint(1, 2)
    chosen = [rng.choices(pairs, weights)[0] for _ in range(count)]
    if require:
        chosen[rng.randrange(count)] = rng.choice(list(require))
    # Reading order (row by row): which shape comes first is then readable from the image; in random
    # order a model can only learn the marginal, and a tiny one wrote the same SVG for every image.
    cells = sorted(
        rng.sample([(c, r) for r in range(3) for c in range(3)], count), key=lambda t: (t[1], t[0])
    )
    cell = size // 3
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" viewBox="0 0 {size} {size}">',
        f'<rect width="{size}" height="{size}" fill="#FFFFFF"/>',
    ]
    for pair, (col, row) in zip(chosen, cells, strict=True):
        colour, _, shape = pair.partition(" ")
        # Sizes and positions follow from what is drawn, no noise: every number in the SVG can be read from
        # the image (random sizes and jitter were digits a model could only guess). Large in their cell, as
        # the scene-graph demo's shapes: at 84 px a 12 px half-size of a 28 px cell.
        a = b = cell * 3 // 7
        if shape == "ellipse":  # visibly not a circle; lying or standing, which the image shows
            a, b = (cell * 13 // 28, cell * 2 // 7)[:: rng.choice((1, -1))]
        cx, cy = col * cell + cell // 2, row * cell + cell // 2
        parts.append(shape_svg(shape, colour, cx, cy, a, b))
    parts.append("</svg>")
    return "\n".join(parts), size, size
