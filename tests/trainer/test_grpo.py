"""VisionGRPOTrainer trains for real on CPU with each tiny family and exposes images to rewards."""

import math

import pytest
import torch
from PIL import Image

from r1vision.trainer.grpo import VisionGRPOTrainer
from r1vision.vision.family import FAMILIES
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


def _color_dataset(color_dir):
    return task_rows("color", color_dir).remove_columns(["completion"])


@pytest.mark.parametrize(
    "family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"]
)
def test_trains_and_rewards_see_images_and_resized_sizes(tiny_model, color_dir, tmp_path, family):
    seen: dict = {}

    def spy(prompts, completions, **kwargs):
        seen.update(kwargs)
        seen["prompts"] = prompts
        return [0.0] * len(completions)

    # 56x56 originals, a budget that forces 28x28 or 32x32: the resize is real.
    factor = FAMILIES[family].factor
    args = grpo_args(tmp_path, min_pixels=factor * factor, max_pixels=factor * factor)
    trainer = VisionGRPOTrainer(
        tiny_model(family), [varied_reward, spy], args=args, train_dataset=_color_dataset(color_dir)
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.train()

    assert math.isfinite(result.training_loss)
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "no parameter changed after two GRPO steps"

    # Reward functions get the PIL images, the resized sizes and the original sizes, per completion.
    n = len(seen["image_sizes"])
    assert n == args.per_device_train_batch_size
    assert all(isinstance(img, Image.Image) for imgs in seen["images"] for img in imgs)
    assert all(sizes == [[factor, factor]] for sizes in seen["image_sizes"])
    assert all(sizes == [[56, 56]] for sizes in seen["original_image_sizes"])
    assert [img.size for img in seen["images"][0]] == [(factor, factor)]

    # The budget is what the model saw: one merged token per factor x factor pixels.
    grid = trainer._buffered_inputs[0]["image_grid_thw"]
    merge = trainer.processing_class.image_processor.merge_size
    patch = factor // merge
    assert grid.tolist()[0] == [1, factor // patch, factor // patch]


def test_multi_image_row_trains(tiny_model, tmp_path):
    from datasets import Dataset

    def row(i):
        return {
            "prompt": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image"},
                        {"type": "text", "text": "left"},
                        {"type": "image"},
                        {"type": "text", "text": "right"},
                    ],
                }
            ],
            "images": [
                Image.new("RGB", (56, 56), (i * 40, 0, 0)),
                Image.new("RGB", (84, 56), (0, i * 40, 0)),
            ],
        }

    seen = {}

    def spy(prompts, completions, image_sizes, **kwargs):
        seen["image_sizes"] = image_sizes
        return [0.0] * len(completions)

    ds = Dataset.from_list([row(i) for i in range(4)])
    args = grpo_args(tmp_path, max_pixels=84 * 84, max_steps=1)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward, spy], args=args, train_dataset=ds)
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert seen["image_sizes"][0] == [[56, 56], [84, 56]]
    # two images per prompt -> two grid rows per sample
    assert trainer._buffered_inputs[0]["image_grid_thw"].shape[0] == 2 * args.per_device_train_batch_size


def test_plain_image_column_and_bytes(tiny_model, color_dir, tmp_path):
    """A single ``image`` column holding raw PNG bytes works like a list of paths."""
    import io

    from datasets import Dataset

    def png(color):
        buf = io.BytesIO()
        Image.new("RGB", (60, 40), color).save(buf, format="PNG")
        return buf.getvalue()

    rows = [
        {
            "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}],
            "image": png(c),
        }
        for c in ("red", "blue", "green", "yellow")
    ]
    args = grpo_args(tmp_path, max_steps=1)
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=Dataset.from_list(rows)
    )
    assert math.isfinite(trainer.train().training_loss)
