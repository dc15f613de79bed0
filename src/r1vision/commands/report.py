"""Mean ± std curves and a mean/max table over runs (seeds) from their metrics.csv."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("report", __doc__)
    p.add_argument("runs", nargs="+", help="run folders (each with metrics.csv), e.g. one per seed")
    add(p, "--metrics", default=None, help="comma-separated metric names (default: every metric group)")
    add(p, "--output_dir", required=True, help="folder for the PNGs and report.md")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from pathlib import Path

    from r1vision.commands._args import UsageError

    for run_dir in a.runs:  # before matplotlib loads: what is missing, named
        if not (Path(run_dir) / "metrics.csv").is_file():
            raise UsageError(f"{run_dir}: no metrics.csv (a run folder of sft, grpo or t2i-grpo holds one)")
    if Path(a.output_dir).exists() and not Path(a.output_dir).is_dir():
        raise UsageError(f"--output_dir {a.output_dir}: a file is in the way (the report writes a folder)")
    from r1vision.report import report

    try:
        print(report(a.runs, a.output_dir, a.metrics.split(",") if a.metrics else None))
    except KeyError as exc:  # an unknown --metrics name: the message lists the available ones
        raise UsageError(f"--metrics: {exc.args[0]}") from None
    return 0
