"""GRPO (VisionGRPOTrainer, TRL's GRPOTrainer for images) on a task's rewards."""

from __future__ import annotations

from collections.abc import Sequence

GROUP = "training"
USAGE = (
    "r1vision grpo --config RECIPE --task T --model M --dataset D --output_dir O "
    "[--reward_funcs R ...] [--any_GRPOConfig_field V] [--dry-run]"
)


def run(argv: Sequence[str]) -> int:
    from r1vision.commands._train import train

    return train("grpo", argv)
