"""The embedded SFT -> GRPO demo on offline data, against SFT continued for the same compute."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "checks and demos"


def build_parser() -> argparse.ArgumentParser:
    p = parser("demo", __doc__)
    add(p, "--output_dir", default="demo_out", help="output folder (default: demo_out)")
    add(p, "--seed", type=int, default=0, help="first seed")
    add(
        p,
        "--seeds",
        minimum=1,
        type=int,
        default=1,
        help="number of seeds (seed, seed+1, ...); table = mean ± std",
    )
    add(
        p,
        "--task",
        default="sgg",
        choices=["sgg", "geometry", "svg", "motion", "t2i"],
        help="sgg: SFT -> GRPO on scene graphs; geometry: on polygon problems; svg: on image -> SVG; "
        "motion: on video (these under OUTPUT_DIR/<task>); "
        "t2i: text-to-image GRPO learning a prompt-conditioned reward (under OUTPUT_DIR/t2i)",
    )
    add(
        p,
        "--quick",
        action="store_true",
        help="a smoke run (well under 2 minutes; too short to learn), except --task motion: ~1.5 minutes that "
        "learn",
    )
    add(p, "--quiet", action="store_true", help="no per-step progress bars")
    add(
        p,
        "--threads",
        minimum=1,
        type=int,
        default=None,
        help="torch threads, pinned (sgg, geometry, svg; t2i always uses 1; default: OMP_NUM_THREADS, else the "
        "machine's cores): the numbers depend on it; recorded in eval.json",
    )
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.demo import run_demo

    return run_demo(a.output_dir, a.seed, a.seeds, a.task, a.quick, a.quiet, a.threads)
