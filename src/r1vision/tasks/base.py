"""The Task interface: what a task family (colour, scene graphs, geometry, SVG) provides to the CLI.

A task turns a dataset source (Hub id, local directory or file) into rows in *trainer format*:

- ``prompt``: conversational messages; the user turn holds one ``{"type": "image"}`` part per image.
- ``images``: list of images for the row (PIL, path relative to ``image_root``, bytes or ``datasets.Image``).
- ``completion`` (SFT only): the assistant turn with the target text.
- any task columns that reward functions read (TRL passes every column as a keyword argument).

Reward functions follow TRL's convention ``f(prompts, completions, **columns) -> list[float]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RewardFunc = Callable[..., list[float]]


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


_MAX_PARTS = 1_000_000  # nodes visited in one completion; bounds hostile or cyclic structures


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, a message list, a message dict or a list of content parts.

    Shared by every task's rewards. Iterative, so a structure nested past the recursion limit (or a cyclic
    one) cannot raise: containers already seen are skipped and at most ``_MAX_PARTS`` nodes are visited.
    (The SVG render sandbox keeps its own copy in ``svg/extract.py`` because its worker processes must not
    import r1vision.)
    """
    if isinstance(completion, str):
        return completion
    parts: list[str] = []
    stack: list[Any] = [completion]
    seen: set[int] = set()
    visited = 0
    while stack and visited < _MAX_PARTS:
        item = stack.pop()
        visited += 1
        if item is None:
            continue
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                if "content" in item:
                    stack.append(item["content"])
                elif item.get("type") == "text":
                    stack.append(str(item.get("text") or ""))
            else:
                stack.extend(reversed(item))
        else:
            try:
                parts.append(str(item))
            except Exception:  # noqa: BLE001 - a hostile __str__ must not crash a reward
                continue
    return "".join(parts)


_REGISTRY: dict[str, type[Task] | str] = {}


def register_task(name: str, target: type[Task] | str) -> None:
    """Register a task class, or a ``"module:Class"`` path imported on first use (keeps optional deps lazy)."""
    _REGISTRY[name] = target


def get_task(name: str) -> Task:
    """Instantiate the task registered under ``name``; the error lists the known names."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(sorted(_REGISTRY))}")
    target = _REGISTRY[name]
    if isinstance(target, str):
        import importlib

        module, _, cls_name = target.partition(":")
        target = getattr(importlib.import_module(module), cls_name)
        _REGISTRY[name] = target
    return target()


def list_tasks() -> list[str]:
    """Names of all registered tasks."""
    return sorted(_REGISTRY)


def evaluate_files(task: Task, gt: str, pred: str, split: str = "test", **kwargs: Any) -> EvalResult:
    """Default ``r1vision eval``: load ground truth with ``task.load``, align predictions by ``index``.

    Tasks with their own prediction formats (e.g. R1-SGG's gathered json) define
    ``evaluate_files(self, gt, pred, split, **kwargs)`` and are called instead.
    """
    custom = getattr(task, "evaluate_files", None)
    if callable(custom):
        return custom(gt, pred, split=split, **kwargs)
    from r1vision.generation.records import read_predictions

    rows = task.load(gt, split=split, **kwargs)
    preds = read_predictions(pred)
    by_index = {int(r["index"]): r for r in preds}
    # Several samples per row (``--num-samples``) are passed as a list: tasks score pass@k from them.
    completions = [
        (by_index[i].get("samples") or by_index[i]["completion"]) if i in by_index else ""
        for i in range(len(rows))
    ]
    result = task.evaluate([rows[i] for i in range(len(rows))], completions, **kwargs)
    result.metrics.setdefault("num_items", float(len(rows)))
    result.metrics.setdefault(
        "missing_predictions", float(sum(1 for i in range(len(rows)) if i not in by_index))
    )
    return result
