"""What the command parsers share: one flag style (``--max_pixels`` = ``--max-pixels``), JSON options,
and the one-line refusal every command gives for bad input (exit code 2, no traceback)."""

from __future__ import annotations

import argparse
from typing import Any


class UsageError(Exception):
    """Bad input a command refuses before doing any work: printed as one line, exit code 2."""


def spellings(name: str) -> list[str]:
    """``--max_pixels`` -> [``--max_pixels``, ``--max-pixels``] (the given one first)."""
    snake = "--" + name[2:].replace("-", "_")
    kebab = "--" + name[2:].replace("_", "-")
    return list(dict.fromkeys([name, snake, kebab]))


def add(p: argparse.ArgumentParser | Any, name: str, **kwargs: Any) -> None:
    """Add option ``name`` (snake case) under both spellings; its value lands in ``name`` without dashes."""
    p.add_argument(*spellings(name), dest=name[2:].replace("-", "_"), **kwargs)


def parser(prog: str, doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """A parser named ``r1vision <prog>`` whose description is the first line of the command's docstring."""
    description = (doc or "").strip().splitlines()[0] if doc else None
    return argparse.ArgumentParser(prog=f"r1vision {prog}", description=description, **kwargs)
