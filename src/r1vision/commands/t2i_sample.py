"""Images (and a contact sheet) from a diffusers pipeline and an optional LoRA, deterministic (ODE, fixed seeds)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("t2i-sample", __doc__)
    add(p, "--model", required=True, help="diffusers pipeline folder or Hub id")
    add(p, "--lora", default=None, help="a LoRA folder (t2i-grpo's OUTPUT/lora or OUTPUT/lora_ema)")
    add(p, "--prompts", required=True, help="a prompt file (.txt, one per line) or a prompt-files folder")
    add(p, "--split", default="test")
    add(p, "--output_dir", required=True)
    add(p, "--steps", type=int, default=40)
    add(p, "--guidance_scale", type=float, default=4.5)
    add(p, "--resolution", type=int, default=None)
    add(p, "--seed", type=int, default=0)
    add(p, "--limit", type=int, default=16)
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.commands._precheck import check_paths

    check_paths(a, model="pipeline folder", prompts="prompt file or folder", lora="LoRA folder")
    from r1vision.diffusion.data import load_prompts
    from r1vision.diffusion.evaluate import contact_sheet
    from r1vision.runners.t2i import sample_images

    prompts = [str(r["prompt"]) for r in load_prompts(a.prompts, a.split, limit=a.limit)]
    images = sample_images(a.model, prompts, f"{a.output_dir}/images", lora=a.lora, steps=a.steps,
                           guidance_scale=a.guidance_scale, resolution=a.resolution, seed=a.seed)  # fmt: skip
    sheet = contact_sheet(images, [p[:60] for p in prompts], f"{a.output_dir}/contact_sheet.png")
    print(f"{len(images)} images in {a.output_dir}/images, contact sheet {sheet}")
    return 0
