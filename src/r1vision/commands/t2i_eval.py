"""Evaluate a text-to-image model (+ LoRA) as Flow-GRPO does: ODE, 40 steps, CFG 4.5, fixed seeds, rewards."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """The flags ``t2i-eval`` and ``t2i-sample`` share. Steps, guidance, resolution and T5 length default to
    the run record beside ``--lora`` (t2i-grpo's r1vision_run.json), else Flow-GRPO's protocol."""
    add(p, "--model", required=True, help="diffusers pipeline folder or Hub id")
    add(p, "--lora", default=None, help="a LoRA folder (t2i-grpo's OUTPUT/lora_ema or OUTPUT/lora)")
    add(p, "--prompts", required=True, help="prompt-files folder (test.txt) or a .txt file")
    add(p, "--split", default="test")
    add(p, "--output_dir", required=True)
    add(
        p,
        "--steps",
        minimum=1,
        type=int,
        default=None,
        help="ODE steps (default: the run's eval steps, else 40)",
    )
    add(p, "--guidance_scale", type=float, default=None, help="CFG (default: the run's, else 4.5)")
    add(
        p,
        "--resolution",
        minimum=16,
        type=int,
        default=None,
        help="image side (default: the run's, else 512 px)",
    )
    add(
        p,
        "--max_sequence_length",
        minimum=1,
        type=int,
        default=None,
        help="T5 tokens (default: the run's, else 128)",
    )
    add(p, "--seed", type=int, default=0, help="image i starts from the noise of seed + i")
    add(p, "--batch_size", minimum=1, type=int, default=8, help="images sampled at once per process")
    add(p, "--device", default=None, help="cuda, cuda:1, cpu (default: a GPU when there is one)")
    add(
        p,
        "--num_processes",
        minimum=1,
        type=int,
        default=1,
        help="shard the prompts over N processes (torchrun)",
    )


def check_sampling_flags(a: argparse.Namespace, command: str) -> None:
    from r1vision.commands._args import UsageError
    from r1vision.commands._precheck import check_paths

    for name in ("steps", "resolution", "batch_size", "num_processes", "limit", "max_sequence_length"):
        value = getattr(a, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be >= 1")
    if a.resolution is not None and a.resolution % 16:
        raise UsageError(f"--resolution {a.resolution}: must be a multiple of 16")
    check_paths(a, model="pipeline folder", prompts="prompt file or folder", lora="LoRA folder")


def relaunch(command: str, argv: Sequence[str], n: int) -> int | None:
    """With ``--num_processes N > 1`` outside a launched process: run this command line in N processes
    under torchrun (each takes a share of the prompts); ``None`` otherwise."""
    import os
    import subprocess
    import sys

    if n <= 1 or os.environ.get("WORLD_SIZE"):
        return None
    from r1vision.configs import CommandLine

    rest = CommandLine.of(argv).without("num_processes")  # the launcher's flag is not the command's
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(n),
        "-m",
        "r1vision.cli",
        command,
        *rest,
    ]
    print(f"r1vision {command}: launching {' '.join(cmd)}", file=sys.stderr)
    return subprocess.call(cmd)


def sampling_kwargs(a: argparse.Namespace) -> dict[str, Any]:
    """The parsed shared flags (:func:`add_sampling_flags`, ``--limit``) as the runners' keyword arguments."""
    return dict(
        model=a.model,
        prompts_source=a.prompts,
        out_dir=a.output_dir,
        split=a.split,
        lora=a.lora,
        steps=a.steps,
        guidance_scale=a.guidance_scale,
        resolution=a.resolution,
        seed=a.seed,
        limit=a.limit,
        device=a.device,
        batch_size=a.batch_size,
        max_sequence_length=a.max_sequence_length,
    )


def build_parser() -> argparse.ArgumentParser:
    p = parser("t2i-eval", __doc__)
    add_sampling_flags(p)
    add(p, "--reward_funcs", nargs="+", default=["ocr"])
    add(p, "--reward_options", default=None, help="JSON {reward: {option: value}}")
    add(p, "--limit", minimum=1, type=int, default=None, help="the first N prompts (Flow-GRPO: all 1,018)")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    check_sampling_flags(a, "t2i-eval")
    launched = relaunch("t2i-eval", argv, a.num_processes)
    if launched is not None:
        return launched
    from r1vision.runners.t2i import evaluate_t2i
    from r1vision.trainer.distributed import finish_process

    metrics = evaluate_t2i(**sampling_kwargs(a), reward_funcs=a.reward_funcs, reward_options=a.reward_options)
    if not metrics:  # a worker other than the first: the first one reports
        return finish_process(0)  # a torchrun worker: no gloo abort at interpreter exit
    for key, value in metrics.items():  # as `r1vision eval` prints: counts without decimals
        shown = f"{int(value)}" if isinstance(value, float) and value.is_integer() else value
        print(f"  {key:<18} {shown:.4f}" if isinstance(shown, float) else f"  {key:<18} {shown}")
    print(f"metrics.json, records.jsonl and contact sheets in {a.output_dir}")
    return finish_process(0)
