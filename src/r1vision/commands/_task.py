"""Task, options and run context from command-line flags, for the commands that have no model to load."""

from __future__ import annotations

from typing import Any


def task_and_options(name: str, raw: str | None, flags: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The task and its parsed options: ``--task_options`` JSON plus option-valued flags (which win)."""
    from r1vision.tasks import get_task
    from r1vision.tasks.options import merge_options

    task = get_task(name)
    return task, task.parse_options(merge_options(raw, flags or {}))


def run_context(family: str | None, min_pixels: int | None, max_pixels: int | None) -> Any:
    """A run context from ``--model_family`` and the budget flags (records usually carry both frames)."""
    from r1vision.tasks.base import RunContext
    from r1vision.vision.budget import resolve_budget

    if family is None:
        if min_pixels is not None or max_pixels is not None:
            from r1vision.commands._args import UsageError

            raise UsageError(
                "--min_pixels/--max_pixels need --model_family (the budget's factor depends on it)"
            )
        return RunContext()
    return RunContext(family, resolve_budget(family, min_pixels, max_pixels))
