"""Short calls of the task contract for tests: options by keyword, a run context from a family and budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r1vision.tasks import get_task
from r1vision.tasks.base import RunContext
from r1vision.vision.budget import PixelBudget


def run_context(
    family: str | None = None,
    max_pixels: int | None = None,
    eos: tuple[int, ...] = (),
    max_completion_length: int | None = None,
) -> RunContext:
    """A run context; ``max_pixels`` sets the budget (with the family's factor)."""
    budget = PixelBudget.for_family(family, max_pixels=max_pixels) if family and max_pixels else None
    return RunContext(family, budget, eos, max_completion_length)


def task_rows(name: str, source: str | Path, split: str = "train", *, family: str | None = None,
              max_pixels: int | None = None, **options: Any):  # fmt: skip
    """``get_task(name).load`` with ``options`` parsed into the task's ``Options``."""
    task = get_task(name)
    return task.load(str(source), split, task.parse_options(options), run_context(family, max_pixels))


def task_rewards(name: str, *, family: str | None = None, max_pixels: int | None = None, eos: tuple[int, ...] = (),
                 max_completion_length: int | None = None, **options: Any):  # fmt: skip
    """``get_task(name).rewards`` with ``options`` parsed into the task's ``Options``."""
    task = get_task(name)
    return task.rewards(
        task.parse_options(options), run_context(family, max_pixels, eos, max_completion_length)
    )
