"""``GeometryTask``: geometry3k / mm_math-style visual maths with MAYE's rewards and evaluation scheme."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r1vision.tasks.base import EvalResult, RewardSpec, RunContext, Task
from r1vision.tasks.geometry.data import DEFAULT_INSTRUCTION, load_geometry_dataset, solution_text
from r1vision.tasks.geometry.evaluate import evaluate_geometry
from r1vision.tasks.geometry.rewards import make_rewards
from r1vision.tasks.geometry.verify import DEFAULT_TIMEOUT_S
from r1vision.tasks.options import option


@dataclass(frozen=True)
class GeometryOptions:
    """Options of the ``geometry`` task (``--task_options``)."""

    column_mapping: dict[str, str] | None = option(
        None, 'source column -> canonical name, e.g. {"problem": "question"}'
    )
    instruction: str | None = option(DEFAULT_INSTRUCTION, "appended to each question")
    system_prompt: str | None = option(None, "system prompt")
    check_images: bool = option(True, "check image files while loading")
    limit: int | None = option(None, "use the first N rows")
    hub_kwargs: dict[str, Any] | None = option(None, "extra datasets.load_dataset arguments")
    accuracy_weight: float = option(1.0, "weight of the accuracy reward")
    format_weight: float = option(0.0, "weight of the <think> format reward")
    language_weight: float = option(
        0.0, "weight of the language reward (minus the share of Chinese characters)"
    )
    no_eos_weight: float = option(1.0, "weight of the truncation penalty")
    no_eos_replaces: bool = option(
        False, "MAYE: a completion cut without EOS scores only the penalty (the other rewards give it 0)"
    )
    require_close_think: bool = option(True, "format reward: require </think>")
    timeout: float = option(DEFAULT_TIMEOUT_S, "seconds per math-verify check")


class GeometryTask(Task):
    """Answer a maths question about a diagram; the final answer goes in ``\\boxed{}``.

    Rows (MAYE schema): ``question`` with ``<image>`` placeholders, ``answer``, ``solution``, ``id``,
    ``image`` (path relative to the jsonl file) and optionally ``choices``.
    """

    name = "geometry"
    description = "visual geometry maths (geometry3k, mm_math; MAYE's schema and evaluation scheme)"
    Options = GeometryOptions
    max_new_tokens = 2048  # MAYE's
    synthesizer = "r1vision.tasks.geometry.synth:synth_geometry"

    def load(self, source: str | Path, split: str, opts: GeometryOptions, run: RunContext):
        """Trainer-format rows via :func:`load_geometry_dataset` (geometry targets hold no coordinates, so
        the pixel budget plays no part here)."""
        return load_geometry_dataset(
            source,
            split,
            column_mapping=opts.column_mapping,
            instruction=opts.instruction,
            system_prompt=opts.system_prompt,
            check_images=opts.check_images,
            limit=opts.limit,
            **dict(opts.hub_kwargs or {}),
        )

    def rewards(self, opts: GeometryOptions, run: RunContext) -> list[RewardSpec]:
        """Accuracy, format, language and (when the run knows its end-of-sequence ids) no-EOS rewards."""
        return make_rewards(
            accuracy_weight=opts.accuracy_weight,
            format_weight=opts.format_weight,
            language_weight=opts.language_weight,
            no_eos_weight=opts.no_eos_weight,
            eos_token_id=list(run.eos_token_ids) or None,
            max_completion_length=run.max_completion_length,
            require_close_think=opts.require_close_think,
            timeout=opts.timeout,
            no_eos_replaces=opts.no_eos_replaces,
        )

    def sft_target(self, row: Mapping[str, Any], opts: GeometryOptions, run: RunContext) -> str:
        return solution_text(row)

    def evaluate(
        self,
        rows: Sequence[Mapping[str, Any]],
        completions: Sequence[str | Sequence[str]],
        opts: GeometryOptions,
        run: RunContext,
    ) -> EvalResult:
        """Accuracy (pass@k), verdicts and reflection metrics: :func:`~.evaluate.evaluate_geometry`."""
        return evaluate_geometry(rows, completions, timeout=opts.timeout)
