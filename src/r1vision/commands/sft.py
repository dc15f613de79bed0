"""Supervised fine-tuning (TRL's SFTTrainer) on a task's targets."""

from __future__ import annotations

from collections.abc import Sequence

GROUP = "training"
USAGE = "r1vision sft --config RECIPE --task T --model M --dataset D --output_dir O [--any_SFTConfig_field V]"


def run(argv: Sequence[str]) -> int:
    from r1vision.commands._train import train

    return train("sft", argv)
