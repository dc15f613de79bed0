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


def test_sft_length_checked_against_video_tokens(tiny_model, motion_dir):
    # A video's tokens (frames x frame tokens) count like an image's: the row is named before step 1.
    from transformers import AutoProcessor

    from r1vision.tasks.motion.data import load_motion_dataset
    from r1vision.trainer.validation import DatasetValidationError, check_sequence_lengths
    from r1vision.vision.budget import PixelBudget
    from r1vision.vision.video import VideoBudget

    processor = AutoProcessor.from_pretrained(tiny_model("qwen2_vl"))
    rows = load_motion_dataset(motion_dir, "train").select(range(2))
    budget, video = PixelBudget.for_family("qwen2_vl"), VideoBudget.for_family("qwen2_vl")
    # 8 frames at 4 fps, 56x56: 4 frames kept, 2 temporal steps of 2x2 tokens
    without = check_sequence_lengths(rows, processor, budget, None)
    assert check_sequence_lengths(rows, processor, budget, None, video_budget=video) == without + 8
    with pytest.raises(
        DatasetValidationError, match=r"row 0 problem_id=0: its prompt needs \d+ tokens \(8 video tokens"
    ):
        check_sequence_lengths(rows, processor, budget, 20, video_budget=video)
