"""List the registered tasks, or one task's options with types and defaults."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "data and models"


def build_parser() -> argparse.ArgumentParser:
    p = parser("tasks", __doc__)
    add(p, "--options", metavar="TASK", default=None, help="print TASK's options with types and defaults")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.tasks import list_tasks, task_class
    from r1vision.tasks.options import describe

    if a.options:
        print(describe(a.options, task_class(a.options).Options))
        return 0
    for name in list_tasks():
        try:
            description = task_class(name).description
        except Exception as exc:  # a task whose optional dependency is missing still gets listed
            description = f"(unavailable: {exc})"
        print(f"{name:10s} {description}")
    return 0
