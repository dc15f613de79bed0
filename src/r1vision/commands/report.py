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
    from r1vision.report import report

    print(report(a.runs, a.output_dir, a.metrics.split(",") if a.metrics else None))
    return 0
