"""List the shipped recipes and launcher configs with their paths (--config takes a name)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from r1vision.commands._args import parser

GROUP = "data and models"


def build_parser() -> argparse.ArgumentParser:
    return parser("configs", __doc__)


def run(argv: Sequence[str]) -> int:
    build_parser().parse_args(list(argv))
    from r1vision.configs import shipped_files

    files = shipped_files()
    if not files:
        print("no shipped configs found", file=sys.stderr)
        return 1
    for rel, path in files:
        print(f"{rel:40s} {path}")
    return 0
