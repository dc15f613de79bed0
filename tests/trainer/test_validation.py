"""Bad rows fail before the first step, naming the row and the path; mismatches fail at run time."""

from __future__ import annotations

import pytest
from datasets import Dataset
from PIL import Image

from r1vision.trainer.grpo import ImagePlaceholderMismatchError, VisionGRPOTrainer
from r1vision.trainer.validation import DatasetValidationError
from tests.helpers.images import image_row, png_bytes
from tests.helpers.paths import RECIPE_FILES
from tests.helpers.training import grpo_args, varied_reward

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


def _prompt(n_images=1, text="colour?"):
    return [{"role": "user", "content": [{"type": "image"}] * n_images + [{"type": "text", "text": text}]}]


def _good_rows(tmp_path, n=4):
    rows = []
    for i in range(n):
        path = tmp_path / f"img{i}.png"
        Image.new("RGB", (56, 56), (i * 50, 10, 10)).save(path)
        rows.append({"id": f"ok-{i}", "prompt": _prompt(), "images": [str(path)]})
    return rows


def _build(tiny_model, tmp_path, rows, **overrides):
    args = grpo_args(tmp_path / "out", **overrides)
    return VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=Dataset.from_list(rows)
    )


def test_missing_file_names_row_and_path(tiny_model, tmp_path):
    rows = _good_rows(tmp_path)
    rows[2]["images"] = [str(tmp_path / "nope" / "missing.png")]
    with pytest.raises(DatasetValidationError) as err:
        _build(tiny_model, tmp_path, rows)
    message = str(err.value)
    assert "row 2" in message and "ok-2" in message and "missing.png" in message and "not found" in message


def test_relative_path_resolved_against_image_root(tiny_model, tmp_path):
    rows = _good_rows(tmp_path)
    for r in rows:
        r["images"] = [r["images"][0].rsplit("/", 1)[1]]  # relative names
    with pytest.raises(DatasetValidationError, match="row 0"):
        _build(tiny_model, tmp_path, rows)  # no image_root: not found from the working directory
    trainer = _build(tiny_model, tmp_path, rows, image_root=str(tmp_path), max_steps=1)
    trainer.train()


def test_corrupt_image_names_row_and_path(tiny_model, tmp_path):
    rows = _good_rows(tmp_path)
    bad = tmp_path / "corrupt.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nthis is not a png")
    rows[1]["images"] = [str(bad)]
    with pytest.raises(DatasetValidationError) as err:
        _build(tiny_model, tmp_path, rows)
    assert "row 1" in str(err.value) and "corrupt.png" in str(err.value) and "cannot decode" in str(err.value)


def test_row_without_the_image_its_prompt_refers_to(tiny_model, tmp_path):
    rows = _good_rows(tmp_path)
    rows[3]["prompt"] = _prompt(n_images=2)
    with pytest.raises(DatasetValidationError) as err:
        _build(tiny_model, tmp_path, rows)
    assert (
        "row 3" in str(err.value) and "2 image part(s)" in str(err.value) and "1 image(s)" in str(err.value)
    )


def test_literal_vision_token_in_prompt_text(tiny_model, tmp_path):
    rows = _good_rows(tmp_path)
    rows[0]["prompt"] = _prompt(text="look <|image_pad|> here")
    with pytest.raises(DatasetValidationError, match=r"row 0.*<\|image_pad\|>"):
        _build(tiny_model, tmp_path, rows)


def test_only_first_n_rows_checked_when_configured(tiny_model, tmp_path):
    rows = _good_rows(tmp_path)
    rows[3]["images"] = [str(tmp_path / "missing.png")]
    _build(tiny_model, tmp_path, rows, validate_rows=3)  # row 3 not checked: construction succeeds


def test_runtime_placeholder_mismatch_names_the_sample(tiny_model, tmp_path):
    """With validation off, a literal image token gets through to tokenization; the run-time check names it."""
    rows = _good_rows(tmp_path)
    for r in rows:
        r["prompt"] = _prompt(text="extra <|image_pad|> token")
    trainer = _build(tiny_model, tmp_path, rows, validate_rows=0)
    with pytest.raises(ImagePlaceholderMismatchError) as err:
        trainer.train()
    assert "id='ok-" in str(err.value) and "image placeholder tokens" in str(err.value)


def test_token_level_check_counts_per_sample(tiny_model, tmp_path):
    """The post-tokenization check compares each sample's image tokens with its images' features."""
    import torch

    trainer = _build(tiny_model, tmp_path, _good_rows(tmp_path))
    trainer._batch_labels = ["row 0 id='a'", "row 1 id='b'"]
    pad = trainer._image_pad_token_id
    grid = torch.tensor([[1, 4, 4], [1, 4, 4]])  # 16 patches / merge 2x2 = 4 tokens each
    trainer._check_placeholders([[1, pad, pad, pad, pad, 2], [pad] * 4], [[object()], [object()]], grid)
    ids_as_tensors = [torch.tensor([1, pad, pad, pad, pad, 2]), torch.tensor([pad] * 4)]
    trainer._check_placeholders(ids_as_tensors, [[object()], [object()]], grid)
    with pytest.raises(
        ImagePlaceholderMismatchError, match=r"row 1 id='b'.*3 image placeholder tokens.*4 image"
    ):
        trainer._check_placeholders([[pad] * 4, [pad] * 3], [[object()], [object()]], grid)
    with pytest.raises(ImagePlaceholderMismatchError, match=r"row 0 id='a'.*5 image placeholder tokens"):
        trainer._check_placeholders([torch.tensor([pad] * 5), [pad] * 4], [[object()], [object()]], grid)


def test_extreme_aspect_ratio_is_named_before_training():
    from r1vision.trainer.validation import DatasetValidationError, validate_row

    with pytest.raises(DatasetValidationError, match=r"row 3 id='r7': images\[0\].*2010x10.*aspect ratio"):
        validate_row(image_row(png_bytes(Image.new("RGB", (2010, 10)))), 3)


def test_grpo_with_fewer_rows_than_a_generation_round_is_refused():
    """A dataset smaller than one generation round made TRL train 0 steps and exit 0 (found by the
    acceptance run of the MAYE geometry recipe: 128 prompts per round)."""
    from r1vision.trainer.validation import DatasetValidationError, check_generation_batch

    args = grpo_args("unused", per_device_train_batch_size=2, num_generations=1, steps_per_generation=64,
                     advantage_estimator="reinforce_pp")  # fmt: skip
    with pytest.raises(DatasetValidationError, match="has 1 row.*128 distinct prompts.*0 steps"):
        check_generation_batch(1, args)
    check_generation_batch(128, args)
