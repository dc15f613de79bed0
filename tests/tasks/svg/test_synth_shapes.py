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
