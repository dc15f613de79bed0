"""Check this environment end to end: versions, devices, processor, a 2-step GRPO run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "checks and demos"


def build_parser() -> argparse.ArgumentParser:
    from r1vision.vision.family import FAMILIES

    p = parser("selftest", __doc__)
    add(
        p,
        "--layout",
        default="single",
        choices=["single", "ddp", "zero3"],
        help="single: in this process; ddp / zero3: through accelerate launch in --nproc processes",
    )
    add(p, "--nproc", minimum=1, type=int, default=2, help="processes for the ddp / zero3 layouts")
    add(p, "--family", default="qwen2_vl", choices=list(FAMILIES))
    add(
        p,
        "--backend",
        default="hf",
        choices=["hf", "vllm_colocate", "vllm_server"],
        help="rollouts: transformers generate, a vLLM engine per process, or one vLLM server per process "
        "(started and stopped by the selftest); vLLM backends need vLLM (on CPU: .venv-vllm)",
    )
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.selftest import run_checks

    return run_checks(a.layout, a.backend, a.family, a.nproc)
