"""Every TRL ``loss_type`` and GSPO's sequence-level importance ratio train with ``VisionGRPOTrainer`` on the
tiny VLM (HF generation): 2 steps, a finite loss, weights that moved, and TRL's metric names in
``metrics.csv``. With ``steps_per_generation`` twice the accumulation the second update is off-policy, so
the ratio-based losses see ratios other than 1."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

LOSSES = [("grpo", "token"), ("dr_grpo", "token"), ("dapo", "token"), ("bnpo", "token"), ("cispo", "token"),
          ("sapo", "token"), ("grpo", "sequence"), ("luspo", "sequence"), ("vespo", "sequence")]  # fmt: skip


@pytest.mark.parametrize(("loss_type", "level"), LOSSES, ids=[f"{a}-{b}" for a, b in LOSSES])
def test_each_loss_type_trains_with_images(loss_type, level, tiny_model, color_dir, tmp_path):
    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path / "run", loss_type=loss_type, importance_sampling_level=level, max_steps=2,
                     steps_per_generation=2, gradient_accumulation_steps=1, beta=0.04)  # fmt: skip
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=rows)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if n in before)
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows_logged = list(csv.DictReader(f))
    assert [r["step"] for r in rows_logged] == ["1", "2"] and moved
    assert all(math.isfinite(float(r["loss"])) for r in rows_logged)
    for name in ("reward", "reward_std", "frac_reward_zero_std", "kl", "completions/mean_length"):
        assert name in rows_logged[0], name
