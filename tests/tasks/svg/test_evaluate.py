"""SVG evaluation: the standard SSIM under its own name, the worst items on the contact sheet."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from r1vision.tasks.svg.evaluate import evaluate, worst
from r1vision.tasks.svg.render import default_pool

NS = 'xmlns="http://www.w3.org/2000/svg"'
GT = (
    f'<svg {NS} width="300" height="200"><rect x="20" y="30" width="120" height="70" fill="#DCE6F2" '
    'stroke="#4C72B0" stroke-width="3"/><circle cx="220" cy="120" r="40" fill="none" stroke="#C44E52" '
    'stroke-width="3"/></svg>'
)
SHIFTED = GT.replace('x="20" y="30"', 'x="34" y="40"').replace('cx="220"', 'cx="205"')
BLANK = f'<svg {NS} width="300" height="200"></svg>'


def test_standard_ssim_is_vfigs_rgb_ssim_at_native_resolution_and_distinct_from_the_reward():
    """Before: eval's "ssim" was the reward's masked, blurred variant (0.990 where VFig's SSIM gives 0.555).

    VFig's eval: ``structural_similarity(ref, gen, channel_axis=2, data_range=255)`` on the RGB images at
    the reference image's size."""
    from skimage.metrics import structural_similarity

    rows = [{"id": k, "svg_gt": GT} for k in range(3)]
    result = evaluate(rows, [GT, SHIFTED, BLANK])
    gt, shifted, blank = (r.image for r in default_pool().render_many([GT, SHIFTED, BLANK], 300, 200))
    for record, pred in zip(result.records, (gt, shifted, blank), strict=True):
        expected = structural_similarity(gt, pred, channel_axis=2, data_range=255)
        assert record["ssim_standard"] == pytest.approx(expected, abs=1e-6)
        assert record["mse"] == pytest.approx(np.mean((gt / 255.0 - pred / 255.0) ** 2), abs=1e-6)
    blank_record = result.records[2]
    # white space counts in the standard SSIM; the reward's ink SSIM gives an empty page nothing
    assert blank_record["ssim_standard"] > 0.8 and blank_record["ssim_reward"] < 0.1
    assert "ssim" not in result.metrics and {"ssim_standard", "ssim_reward"} <= set(result.metrics)


def test_contact_sheet_shows_the_worst_items_and_a_summary(tmp_path):
    """Before: a seeded random sample of 16 items."""
    rows = [{"id": k, "svg_gt": GT} for k in range(6)]
    completions = [GT, GT, SHIFTED, "no svg at all", GT, BLANK]
    result = evaluate(rows, completions, contact_sheet=tmp_path / "sheet.png", sheet_n=3)
    assert worst(result.records, 3) == [3, 5, 2]  # the failure first, then the lowest rewards
    with Image.open(tmp_path / "sheet.png") as sheet:
        pixels = np.asarray(sheet.convert("L"))
    assert pixels.shape == (40 + 2 * (256 + 34 + 8), 2 * (2 * 256 + 12))
    assert (pixels[:40] < 128).any()  # the summary band has text
