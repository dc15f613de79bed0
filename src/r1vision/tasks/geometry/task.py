"""``GeometryTask``: geometry3k / mm_math-style visual maths with MAYE's rewards and evaluation scheme."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1vision.tasks.base import EvalResult, RewardSpec, Task
from r1vision.tasks.geometry.data import DEFAULT_INSTRUCTION, load_geometry_dataset, solution_text
from r1vision.tasks.geometry.evaluate import evaluate_geometry
from r1vision.tasks.geometry.rewards import build_reward_specs
from r1vision.tasks.geometry.verify import DEFAULT_TIMEOUT_S


def _accepted(func: Any, options: dict[str, Any], exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The entries of ``options`` that are keyword parameters of ``func``."""
    params = inspect.signature(func).parameters
    return {k: v for k, v in options.items() if k in params and k not in exclude}


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class GeometryOptions:
    """Options of the ``geometry`` task (``--task_options``)."""

    column_mapping: dict[str, str] | None = field(
        default=None, metadata=_help('source column -> canonical name, e.g. {"problem": "question"}')
    )
    instruction: str | None = field(default=DEFAULT_INSTRUCTION, metadata=_help("appended to each question"))
    system_prompt: str | None = field(default=None, metadata=_help("system prompt"))
    check_images: bool = field(default=True, metadata=_help("check image files while loading"))
    limit: int | None = field(default=None, metadata=_help("use the first N rows"))
    hub_kwargs: dict[str, Any] | None = field(
        default=None, metadata=_help("extra datasets.load_dataset arguments")
    )
    accuracy_weight: float = field(default=1.0, metadata=_help("weight of the accuracy reward"))
    format_weight: float = field(default=0.0, metadata=_help("weight of the <think> format reward"))
    language_weight: float = field(default=0.0, metadata=_help("weight of the language-mixing penalty"))
    no_eos_weight: float = field(default=1.0, metadata=_help("weight of the truncation penalty"))
    require_close_think: bool = field(default=True, metadata=_help("format reward: require </think>"))
    timeout: float = field(default=DEFAULT_TIMEOUT_S, metadata=_help("seconds per math-verify check"))


class GeometryTask(Task):
    """Answer a maths question about a diagram; the final answer goes in ``\\boxed{}``.

    Rows (MAYE schema): ``question`` with ``<image>`` placeholders, ``answer``, ``solution``, ``id``,
    ``image`` (path relative to the jsonl file) and optionally ``choices``.
    """

    name = "geometry"
    description = "visual geometry maths (geometry3k, mm_math; MAYE's schema and evaluation scheme)"
    Options = GeometryOptions

    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        from r1vision.tasks.geometry.synth import synth_geometry

        return synth_geometry(out_dir, n, seed=seed, split=split)

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        """Trainer-format rows via :func:`load_geometry_dataset`.

        Options (:class:`GeometryOptions`): ``column_mapping``, ``instruction``, ``system_prompt``,
        ``check_images``, ``limit`` and ``hub_kwargs``; the reward options and the runner's context (the
        pixel budget: geometry targets hold no coordinates) are accepted and not used here. An unknown
        option is an error.
        """
        self.check_options(kwargs)
        options = _accepted(load_geometry_dataset, kwargs, exclude=("source", "split", "load_kwargs"))
        return load_geometry_dataset(source, split, **options, **dict(kwargs.get("hub_kwargs") or {}))

    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        """Accuracy, format, language and (with ``eos_token_id``) no-EOS rewards; see ``build_reward_specs``.

        Load options and the runner's context (e.g. ``model_family``) are accepted and not used here; an
        unknown option is an error.
        """
        self.check_options(kwargs)
        return build_reward_specs(**_accepted(build_reward_specs, kwargs))

    def completion_text(self, row: dict[str, Any], **kwargs: Any) -> str:
        return solution_text(row)

    def evaluate(
        self, rows: Sequence[dict[str, Any]], completions: Sequence[str | Sequence[str]], **kwargs: Any
    ) -> EvalResult:
        """Accuracy (pass@k), verdicts and reflection metrics: :func:`~.evaluate.evaluate_geometry`.

        ``lengths``, ``max_length`` and ``timeout`` pass through; other options are accepted and not used.
        """
        return evaluate_geometry(
            rows, completions, **_accepted(evaluate_geometry, kwargs, ("rows", "completions"))
        )
