"""VisionGRPOTrainer / VisionSFTTrainer as drop-ins for TRL's trainers on families outside Qwen-VL (LLaVA-NeXT and
Gemma 3, which TRL's own VLM tests train): they train as stock TRL would, with one line naming what does
not apply; the Qwen families keep every check."""

from __future__ import annotations

import logging

import pytest

from tests.helpers.families import BUILDERS
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


@pytest.fixture(scope="module")
def family_model(tmp_path_factory):
    built: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in built:
            built[name] = str(BUILDERS[name](tmp_path_factory.mktemp(name)))
        return built[name]

    return get


@pytest.mark.parametrize("family", ["llava_next", "gemma3"])
def test_grpo_trains_other_families_with_a_note(family, family_model, color_dir, tmp_path, caplog):
    import torch

    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path, max_steps=1, max_pixels=None, lora_r=4, freeze_vision_tower=True)
    with caplog.at_level(logging.WARNING, logger="r1vision.trainer.setup"):
        trainer = VisionGRPOTrainer(family_model(family), [varied_reward], args=args, train_dataset=rows)
    assert f"model type {family!r} is not a Qwen-VL family" in caplog.text
    assert trainer.model_family is None and trainer.pixel_budget is None
    adapted = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapted and all("lora_" in n and "language_model" in n for n in adapted)  # never the vision tower
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if n in before)


def test_sft_trains_another_family(family_model, color_dir, tmp_path):
    from r1vision.trainer.config import VisionSFTConfig
    from r1vision.trainer.sft import VisionSFTTrainer

    rows = task_rows("color", color_dir)
    args = VisionSFTConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, use_cpu=True,
                           report_to=[], save_strategy="no", logging_steps=1)  # fmt: skip
    trainer = VisionSFTTrainer(family_model("llava_next"), args=args, train_dataset=rows)
    trainer.train()
    assert trainer.state.log_history and "loss" in trainer.state.log_history[0]
