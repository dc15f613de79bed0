"""VisionGRPOTrainer is a drop-in for TRL's GRPOTrainer on the newest Qwen families: the same model, data,
seed and settings log the same GRPO metrics for two steps (same completions, rewards and loss; gradient
norms within 1 %, as on the older families: r1vision's own image and loss plumbing sums in another order)."""

from __future__ import annotations

import pytest

from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

KEYS = ("loss", "reward", "reward_std", "completions/mean_length", "entropy", "grad_norm")


def _metrics(trainer) -> list[dict[str, float]]:
    trainer.train()
    return [{k: h[k] for k in KEYS} for h in trainer.state.log_history if "loss" in h]


@pytest.mark.parametrize("family", ["qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"])
def test_same_metrics_as_stock_grpo_trainer(family, tiny_model, color_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir).remove_columns(["completion"])
    ours = grpo_args(tmp_path / "ours", max_pixels=None)  # the processor's own budget, as stock TRL uses
    fields = ("per_device_train_batch_size", "num_generations", "max_completion_length", "max_steps",
              "logging_steps", "use_cpu", "report_to", "learning_rate", "save_strategy", "seed", "disable_tqdm", "bf16")  # fmt: skip
    stock = GRPOConfig(output_dir=str(tmp_path / "stock"), **{f: getattr(ours, f) for f in fields})
    path = tiny_model(family)
    expected = _metrics(GRPOTrainer(path, [varied_reward], args=stock, train_dataset=rows))
    got = _metrics(VisionGRPOTrainer(path, [varied_reward], args=ours, train_dataset=rows))
    assert len(got) == len(expected) == 2
    for step, (a, b) in enumerate(zip(got, expected, strict=True)):
        for key in KEYS:
            tolerance = 1e-2 if key == "grad_norm" else 1e-4
            assert a[key] == pytest.approx(b[key], rel=tolerance, abs=1e-6), (step, key, a[key], b[key])
