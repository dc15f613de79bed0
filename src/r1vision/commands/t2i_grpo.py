"""Text-to-image GRPO (Flow-GRPO) on a diffusers SD3/SD3.5 pipeline with image rewards (OCR, ...)."""

from __future__ import annotations

from collections.abc import Sequence

GROUP = "training"
USAGE = (
    "r1vision t2i-grpo --config RECIPE --model PIPELINE --dataset PROMPTS --output_dir O "
    "[--reward_funcs ocr ...] [--any_DiffusionGRPOConfig_field V] [--dry-run]"
)


def run(argv: Sequence[str]) -> int:
    from r1vision.commands._train import train

    return train("t2i-grpo", argv)
