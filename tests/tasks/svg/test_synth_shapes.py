"""The svg synthesiser's ``demo`` preset: short SVG figures that render, with rare and required pairs."""

from __future__ import annotations

import random
import re

import pytest

from r1vision.tasks.svg.synth_shapes import COLOURS, shapes_figure


def _pairs(svg: str) -> set[str]:
    names = {v: k for k, v in COLOURS.items()}
    found = re.findall(r'<(rect|circle|ellipse) [^>]*fill="(#[0-9A-F]{6})"', svg)
    return {f"{names[fill]} {shape}" for shape, fill in found if fill in names}


def test_excluded_pairs_never_drawn_and_required_pairs_always():
    rng = random.Random(0)
    held = ["red circle", "blue rect"]
    seen = set()
    for _ in range(300):
        svg, w, h = shapes_figure(rng, 84, exclude=held)
        assert (w, h) == (84, 84)
        seen |= _pairs(svg)
    assert not seen & set(held) and len(seen) == 7
    for _ in range(50):
        assert _pairs(shapes_figure(rng, 84, require=held)[0]) & set(held)


def test_demo_figures_render_to_their_png(tmp_path):
    import numpy as np
    import pyarrow.parquet as pq
    from PIL import Image

    from r1vision.tasks.svg.synth import synth_svg

    path = synth_svg(tmp_path, 6, seed=3, split="test_ood", preset="demo", require=["green ellipse"])
    rows = pq.read_table(path).to_pylist()
    assert len(rows) == 6 and all("green" not in r["response"] or "#55A868" in r["response"] for r in rows)
    for r in rows:
        image = np.asarray(Image.open(tmp_path / r["images"][0]).convert("RGB"))
        assert image.shape == (84, 84, 3) and (image != 255).any()  # drawn, not blank
        assert "green ellipse" in _pairs(r["response"])


def test_bad_pair_is_refused():
    with pytest.raises(ValueError, match="'purple rect'"):
        shapes_figure(random.Random(0), exclude=["purple rect"])


def test_every_number_in_a_demo_figure_is_readable_from_the_image():
    """Shapes in reading order, sizes and positions fixed by shape and cell: no digit is noise to guess."""
    rng = random.Random(1)
    centres = {14, 42, 70}
    for _ in range(200):
        svg, _, _ = shapes_figure(rng, 84)
        found = re.findall(r"<(rect|circle|ellipse) ([^/]*)/>", svg)[1:]  # after the white background
        cells = []
        for shape, attrs in found:
            v = {k: int(x) for k, x in re.findall(r'(\w+)="(\d+)"', attrs)}
            if shape == "rect":
                assert v["width"] == v["height"] == 24
                cx, cy = v["x"] + 12, v["y"] + 12
            elif shape == "circle":
                assert v["r"] == 12
                cx, cy = v["cx"], v["cy"]
            else:
                assert {v["rx"], v["ry"]} == {13, 8}
                cx, cy = v["cx"], v["cy"]
            assert cx in centres and cy in centres
            cells.append((cy, cx))
        assert cells == sorted(cells) and len(set(cells)) == len(cells)  # row by row, left to right
