"""What the command parsers share: one flag style (``--max_pixels`` = ``--max-pixels``), JSON options,
and the one-line refusal every command gives for bad input (exit code 2, no traceback)."""

from __future__ import annotations

import argparse
from typing import Any

from r1vision.suggest import closest


class UsageError(Exception):
    """Bad input a command refuses before doing any work: printed as one line, exit code 2."""


def spellings(name: str) -> list[str]:
    """``--max_pixels`` -> [``--max_pixels``, ``--max-pixels``] (the given one first)."""
    snake = "--" + name[2:].replace("-", "_")
    kebab = "--" + name[2:].replace("_", "-")
    return list(dict.fromkeys([name, snake, kebab]))


def add(p: argparse.ArgumentParser | Any, name: str, minimum: float | None = None, **kwargs: Any) -> None:
    """Add option ``name`` (snake case) under both spellings; its value lands in ``name`` without dashes.
    ``minimum``: a number below it is refused by the parser (one line, exit 2, naming the flag)."""
    if minimum is not None:
        kwargs["type"] = _at_least(kwargs.get("type", int), minimum)
    p.add_argument(*spellings(name), dest=name[2:].replace("-", "_"), **kwargs)


def _at_least(cast: Any, minimum: float) -> Any:
    def convert(text: str) -> Any:
        value = cast(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g}, got {text}")
        return value

    convert.__name__ = getattr(cast, "__name__", "number")  # argparse names the type in its messages
    return convert


class OneLineParser(argparse.ArgumentParser):
    """argparse with the commands' refusal style: one line and exit code 2 (no usage block), the nearest
    flag suggested for an unknown one, and no abbreviations (``--spl`` is not silently ``--split``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse's hook; never returns

        hint = ""
        if message.startswith("unrecognized arguments:"):
            flags = [a for a in message.split(":", 1)[1].split() if a.startswith("--")]
            options = [o for o in self._option_string_actions if o.startswith("--")]
            close = closest(flags[0].split("=")[0], options) if flags else None
            hint = f"; did you mean {close!r}?" if close else ""
        self.exit(2, f"{self.prog}: error: {message}{hint} ({self.prog} --help lists the flags)\n")


def parser(prog: str, doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """A parser named ``r1vision <prog>`` whose description is the first line of the command's docstring."""
    description = (doc or "").strip().splitlines()[0] if doc else None
    return OneLineParser(prog=f"r1vision {prog}", description=description, **kwargs)
