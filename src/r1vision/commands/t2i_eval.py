"""Evaluate a text-to-image model (+ LoRA) as Flow-GRPO does: ODE, 40 steps, CFG 4.5, fixed seeds, rewards."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("t2i-eval", __doc__)
    add(p, "--model", required=True, help="diffusers pipeline folder or Hub id")
    add(p, "--lora", default=None, help="a LoRA folder (t2i-grpo's OUTPUT/lora_ema)")
    add(p, "--prompts", required=True, help="prompt-files folder (test.txt) or a .txt file")
    add(p, "--split", default="test")
    add(p, "--output_dir", required=True)
    add(p, "--reward_funcs", nargs="+", default=["ocr"])
    add(p, "--reward_options", default=None, help="JSON {reward: {option: value}}")
    add(p, "--steps", type=int, default=40)
    add(p, "--guidance_scale", type=float, default=4.5)
    add(p, "--resolution", type=int, default=None)
    add(p, "--seed", type=int, default=0)
    add(p, "--limit", type=int, default=None, help="the first N prompts (Flow-GRPO: all 1,018)")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.commands._precheck import check_paths

    check_paths(a, model="pipeline folder", prompts="prompt file or folder", lora="LoRA folder")
    from r1vision.runners.t2i import evaluate_t2i

    metrics = evaluate_t2i(a.model, a.prompts, a.output_dir, split=a.split, lora=a.lora, reward_funcs=a.reward_funcs,
                           reward_options=a.reward_options, steps=a.steps, guidance_scale=a.guidance_scale,
                           resolution=a.resolution, seed=a.seed, limit=a.limit)  # fmt: skip
    for key, value in metrics.items():  # as `r1vision eval` prints: counts without decimals
        shown = f"{int(value)}" if isinstance(value, float) and value.is_integer() else value
        print(f"  {key:<18} {shown:.4f}" if isinstance(shown, float) else f"  {key:<18} {shown}")
    print(f"metrics.json, records.jsonl and contact_sheet.png in {a.output_dir}")
    return 0
