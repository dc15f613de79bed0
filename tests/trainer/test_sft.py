"""``VisionSFTTrainer``: sequence lengths checked against image tokens before training."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.helpers.images import image_row, png_bytes
from tests.helpers.paths import RECIPE_FILES

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


def test_sft_length_checked_against_image_tokens(tiny_model):
    from transformers import AutoProcessor

    from r1vision.trainer.config import VisionSFTConfig
    from r1vision.trainer.validation import DatasetValidationError, check_sequence_lengths
    from r1vision.vision.budget import PixelBudget

    assert VisionSFTConfig(output_dir="x", use_cpu=True).max_length is None  # TRL's 1024: too short
    processor = AutoProcessor.from_pretrained(tiny_model("qwen2_vl"))
    row = image_row(png_bytes(Image.new("RGB", (1024, 1024), "red")))
    row["completion"] = [{"role": "assistant", "content": [{"type": "text", "text": "red"}]}]
    budget = PixelBudget.for_family("qwen2_vl")  # the default budget: 35 x 35 = 1,225 tokens for this photo
    assert check_sequence_lengths([row], processor, budget, None) > 1225
    with pytest.raises(
        DatasetValidationError, match=r"row 0 id='r7': its prompt needs \d+ tokens \(1225 image tokens"
    ):
        check_sequence_lengths([row], processor, budget, 1024)
