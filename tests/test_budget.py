"""The pixel budget rule matches Qwen-VL's smart_resize and rejects bad budgets."""

import pytest
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from r1vision.vision.budget import PixelBudget, resized_size


@pytest.mark.parametrize("factor", [28, 32])
@pytest.mark.parametrize(
    "size", [(84, 84), (640, 480), (1999, 37), (37, 1999), (28, 28), (10, 10), (4000, 3000), (333, 777)]
)
def test_matches_transformers_smart_resize(size, factor):
    w, h = size
    lo, hi = 56 * 56, 28 * 28 * 256
    expected_h, expected_w = smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    assert resized_size(w, h, lo, hi, factor) == (expected_w, expected_h)


def test_budget_bounds_and_tokens():
    budget = PixelBudget.for_family("qwen2_vl", min_pixels=28 * 28, max_pixels=28 * 28 * 4)
    w, h = budget.resized_size(1000, 1000)
    assert w * h <= budget.max_pixels and w % 28 == 0 and h % 28 == 0
    assert budget.num_tokens(1000, 1000) == 4
    assert PixelBudget.for_family("qwen3_vl").factor == 32


def test_invalid_budget_is_rejected():
    with pytest.raises(ValueError, match="min_pixels"):
        PixelBudget(min_pixels=1000, max_pixels=10)
