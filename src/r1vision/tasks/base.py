"""The Task interface (registry: :mod:`r1vision.tasks.registry`; the ``eval`` runner:
:mod:`r1vision.recipes.evaluate`): what a task family (colour, scene graphs, geometry, SVG) provides to the CLI.

A task turns a dataset source (Hub id, local directory or file) into rows in *trainer format*:

- ``prompt``: conversational messages; the user turn holds one ``{"type": "image"}`` part per image.
- ``images``: list of images for the row (PIL, path relative to ``image_root``, bytes or ``datasets.Image``).
- ``completion`` (SFT only): the assistant turn with the target text.
- any task columns that reward functions read (TRL passes every column as a keyword argument).

Reward functions follow TRL's convention ``f(prompts, completions, **columns) -> list[float]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from r1vision.tasks.common import RewardFunc, completion_text
from r1vision.tasks.options import NoOptions, check_options, parse_options

__all__ = ["EvalResult", "RewardFunc", "RewardSpec", "Task", "completion_text"]


@dataclass(frozen=True)
class RewardSpec:
    """A named reward function with its default weight and the range its values lie in."""

    name: str
    func: RewardFunc
    weight: float = 1.0
    low: float = 0.0
    high: float = 1.0


@dataclass
class EvalResult:
    """Metrics of one evaluation run plus per-row records (written as jsonl by the CLI)."""

    metrics: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)


class Task(ABC):
    """Base class of a task family. Subclasses are registered with :func:`register_task`."""

    name: str = ""
    description: str = ""
    #: The task's options as a dataclass (types, defaults, help); see :mod:`r1vision.tasks.options`.
    Options: ClassVar[type] = NoOptions

    @classmethod
    def parse_options(cls, given: dict[str, Any] | None) -> Any:
        """The user's options (``--task_options``) as an ``Options`` instance; unknown names or wrong
        types raise :class:`~r1vision.tasks.options.TaskOptionError` naming the valid ones."""
        return parse_options(cls.name, cls.Options, given)

    def check_options(self, given: dict[str, Any]) -> dict[str, Any]:
        """Validate keyword options (the task's own plus the runner's context keys); return them."""
        return check_options(self.name, self.Options, given)

    @abstractmethod
    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        """Write a procedurally generated dataset in the schema of the real one; return its path."""

    @abstractmethod
    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        """Load ``source`` (Hub id, directory or file) and return a ``datasets.Dataset`` in trainer format."""

    @abstractmethod
    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        """The task's reward functions with default weights."""

    def completion_text(self, row: dict[str, Any], **kwargs: Any) -> str:
        """Target text for SFT of one raw row. Tasks without SFT targets may leave it unimplemented."""
        raise NotImplementedError(f"task {self.name!r} has no SFT target")

    def evaluate(
        self, rows: Sequence[dict[str, Any]], completions: Sequence[str], **kwargs: Any
    ) -> EvalResult:
        """Score model outputs against rows. Default: mean of every reward function."""
        prompts = [r.get("prompt") for r in rows]
        columns = {k: [r.get(k) for r in rows] for k in rows[0]} if rows else {}
        columns.pop("prompt", None)
        metrics: dict[str, float] = {}
        for spec in self.rewards():
            values = spec.func(prompts, list(completions), **columns)
            metrics[f"reward/{spec.name}"] = float(sum(values) / max(len(values), 1))
        return EvalResult(metrics=metrics)
