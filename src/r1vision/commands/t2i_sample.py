"""Images (and contact sheets) from a diffusers pipeline and an optional LoRA, deterministic (ODE, fixed seeds)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser
from r1vision.commands.t2i_eval import add_sampling_flags, check_sampling_flags, relaunch, sampling_kwargs

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("t2i-sample", __doc__)
    add_sampling_flags(p)
    add(p, "--limit", minimum=1, type=int, default=16, help="the first N prompts")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    check_sampling_flags(a, "t2i-sample")
    launched = relaunch("t2i-sample", argv, a.num_processes)
    if launched is not None:
        return launched
    from r1vision.runners.t2i import sample_t2i
    from r1vision.trainer.distributed import finish_process

    out = sample_t2i(**sampling_kwargs(a))
    print(f"images in {out}/images, contact sheets in {out}")
    return finish_process(0)  # a torchrun worker: no gloo abort at interpreter exit
