"""The Task interface: what a task family (colour, scene graphs, geometry, SVG) gives the runners.

The contract, in the spirit of lm-evaluation-harness's ``TaskConfig``: the runner parses the user's
options once into the task's typed ``Options`` (:meth:`Task.parse_options`) and builds one frozen
:class:`RunContext` (model family, resolved pixel budget, end-of-sequence ids, completion length); every
method receives those two values and reads their fields. Registry: :mod:`r1vision.tasks.registry`.

A task turns a dataset source (Hub id, local folder or file) into rows in *trainer format*:

- ``prompt``: conversational messages; the user turn holds one ``{"type": "image"}`` part per image.
- ``images``: list of images for the row (PIL, path relative to ``image_root``, bytes or ``datasets.Image``).
- ``completion`` (SFT only): the assistant turn with the target text.
- any task columns that reward functions read (TRL passes every column as a keyword argument).

Reward functions follow TRL's convention ``f(prompts, completions, **columns) -> list[float]``; each
:class:`RewardSpec` declares the range its values lie in, which the runners enforce
(:func:`guarded_rewards`). Both live in the one reward registry, :mod:`r1vision.rewards`.
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from r1vision.rewards import RewardFunc, RewardSpec
from r1vision.rewards import guarded as guarded_rewards
from r1vision.tasks.options import NoOptions, TaskOptionError, parse_options
from r1vision.vision.budget import PixelBudget
from r1vision.vision.records import align_predictions

__all__ = ["EvalResult", "RewardFunc", "RewardSpec", "RunContext", "Task", "guarded_rewards"]


@dataclass(frozen=True)
class RunContext:
    """What the runner knows about the run that a task needs, resolved once.

    ``model_family`` fixes the box frame (SGG), ``budget`` is the resolved pixel budget every image is
    resized to (``None``: the family's default), ``eos_token_ids`` and ``max_completion_length`` let
    rewards judge truncation (geometry's ``no_eos``).
    """

    model_family: str | None = None
    budget: PixelBudget | None = None
    eos_token_ids: tuple[int, ...] = ()
    max_completion_length: int | None = None

    def pixel_budget(self) -> PixelBudget | None:
        """The budget, else the family's default one; ``None`` when neither is known."""
        if self.budget is not None:
            return self.budget
        return PixelBudget.for_family(self.model_family) if self.model_family else None


@dataclass
class EvalResult:
    """Metrics of one evaluation run plus per-row records (written as jsonl by the CLI)."""

    metrics: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)


class Task(ABC):
    """Base class of a task family. Subclasses are registered with :func:`register_task`.

    Subclasses set ``name``, ``description``, ``Options`` (a frozen dataclass) and ``max_new_tokens`` (the
    longest answer the task's model writes, in real Qwen tokens: ``r1vision infer``'s default), and
    implement :meth:`load` and :meth:`rewards`; ``synthesizer`` names the offline data generator.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: The task's options as a frozen dataclass (types, defaults, help); see :mod:`r1vision.tasks.options`.
    Options: ClassVar[type] = NoOptions
    #: ``infer``'s default number of new tokens, unless the user sets one.
    max_new_tokens: ClassVar[int] = 1024
    #: ``"module:function"`` that writes a synthetic dataset (see :meth:`synth`).
    synthesizer: ClassVar[str] = ""
    # rows carry videos (``--dry-run`` then sizes the prompts by the video budget)
    videos: ClassVar[bool] = False

    @classmethod
    def parse_options(cls, given: Mapping[str, Any] | None = None) -> Any:
        """The user's options (``--task_options``, a recipe's ``task_options``) as an ``Options`` instance;
        unknown names or wrong types raise :class:`~r1vision.tasks.options.TaskOptionError` naming the
        valid ones. An ``Options`` instance is returned as it is."""
        if isinstance(given, cls.Options):
            return given
        return parse_options(cls.name, cls.Options, given)

    def synth(
        self,
        out_dir: str | Path,
        n: int,
        seed: int = 0,
        split: str = "train",
        options: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write a procedurally generated dataset in the schema of the real one; return its path.

        Calls the task's ``synthesizer`` (``"module:function"``, imported on first use) as
        ``f(out_dir, n, seed=seed, split=split, **options)``; ``options`` are the generator's own
        (``--synth_options``), checked by its signature.
        """
        if not self.synthesizer:
            raise NotImplementedError(f"task {self.name!r} has no synthetic data generator")
        module, _, name = self.synthesizer.partition(":")
        generator = getattr(importlib.import_module(module), name)
        options = dict(options or {})
        try:
            inspect.signature(generator).bind(out_dir, n, seed=seed, split=split, **options)
        except TypeError as exc:  # an option the generator does not take
            raise TaskOptionError(f"task {self.name!r}: --synth_options: {exc}") from None
        return generator(out_dir, n, seed=seed, split=split, **options)

    @abstractmethod
    def load(self, source: str | Path, split: str, opts: Any, run: RunContext):
        """Load ``source`` (Hub id, folder or file) and return a ``datasets.Dataset`` in trainer format."""

    @abstractmethod
    def rewards(self, opts: Any, run: RunContext) -> list[RewardSpec]:
        """The task's reward functions with their default weights and ranges."""

    def sft_target(self, row: Mapping[str, Any], opts: Any, run: RunContext) -> str:
        """Target text for SFT of one raw row. Tasks without SFT targets leave it unimplemented."""
        raise NotImplementedError(f"task {self.name!r} has no SFT target")

    def evaluate(
        self, rows: Sequence[Mapping[str, Any]], completions: Sequence[Any], opts: Any, run: RunContext
    ) -> EvalResult:
        """Score model outputs against rows. Default: the mean of every reward (held to its range)."""
        prompts = [r.get("prompt") for r in rows]
        columns = {k: [r.get(k) for r in rows] for k in rows[0]} if rows else {}
        columns.pop("prompt", None)
        metrics: dict[str, float] = {}
        for spec in guarded_rewards(self.rewards(opts, run)):
            values = spec.func(prompts, list(completions), **columns)
            metrics[f"reward/{spec.name}"] = float(sum(values) / max(len(values), 1))
        return EvalResult(metrics=metrics)

    def visualize(
        self,
        gt: str,
        pred: str | None,
        indices: list[int],
        out_dir: str,
        split: str,
        opts: Any,
        run: RunContext,
    ) -> list[Path]:
        """``r1vision viz``: drawings of the rows ``indices`` against their predictions; the paths written.
        Tasks without a drawing leave it unimplemented."""
        raise NotImplementedError(f"task {self.name!r} has no drawing (r1vision viz)")

    def evaluate_files(self, gt: str, pred: str, split: str, opts: Any, run: RunContext) -> EvalResult:
        """``r1vision eval``: ground truth through :meth:`load`, predictions from ``r1vision infer`` records
        aligned by row index (ids checked, so another split's predictions are refused), then
        :meth:`evaluate`. Tasks with their own prediction formats (R1-SGG's gathered json) override it."""
        rows = self.load(gt, split, opts, run)
        aligned = align_predictions(rows, pred, gt)
        result = self.evaluate([rows[i] for i in range(len(rows))], aligned.completions, opts, run)
        result.metrics.setdefault("num_items", float(len(rows)))
        result.metrics.setdefault("missing_predictions", float(aligned.missing))
        # a record without its completion answered nothing: scored as a failure and left out of coverage
        result.metrics.setdefault("records_without_completion", float(aligned.without_completion))
        covered = len(rows) - aligned.missing - aligned.without_completion
        result.metrics.setdefault("coverage", covered / len(rows) if len(rows) else 0.0)
        return result
