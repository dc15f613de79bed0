"""The ``svg`` task: figure image -> SVG code (VFig), with sandboxed rendering and local visual rewards."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..base import EvalResult, RewardSpec, RunContext, Task
from ..options import option
from .data import load_svg_dataset
from .evaluate import evaluate
from .prompts import PROMPT
from .rewards import DEFAULT_WEIGHTS, RewardConfig, SVGScorer, make_rewards


@dataclass(frozen=True)
class SVGOptions:
    """Options of the ``svg`` task (``--task_options``)."""

    columns: dict[str, str] | None = option(
        None, '{"image": col, "svg": col}: any dataset instead of the VFig schema'
    )
    image_root: str | None = option(None, "folder relative image paths resolve against")
    prompt: str = option(PROMPT, "the instruction (mapped columns only)")
    limit: int | None = option(None, "use the first N rows")
    hub_kwargs: dict[str, Any] | None = option(None, "extra datasets.load_dataset arguments")
    weights: dict[str, float] | None = option(None, "reward term -> weight")
    combined: bool = option(False, "one svg_visual reward instead of one per term")
    config: dict[str, Any] | None = option(None, "RewardConfig fields (render size, blur, ...)")
    judge: str | dict[str, Any] | None = option(
        None, '"auto", or JudgeConfig fields as a dict: add svg_judge'
    )
    judge_weight: float = option(1.0, "weight of svg_judge")
    contact_sheet: str | None = option(None, "eval: PNG of ground truth vs prediction")
    sheet_n: int = option(16, "eval: items on the contact sheet")

    def reward_config(self) -> RewardConfig | None:
        """``config`` as a :class:`RewardConfig` (``None``: the defaults)."""
        return RewardConfig(**self.config) if self.config else None


class SVGTask(Task):
    """Image -> SVG. Rewards: ``svg_valid``, ``svg_pixel``, ``svg_ssim``, ``svg_edge`` (+ optional
    ``svg_length`` and ``svg_judge``)."""

    name = "svg"
    description = "convert a figure image into SVG code (VFig); rendered in a sandbox and compared visually"
    Options = SVGOptions
    max_new_tokens = 4096  # VFig's completion length; figures of 1-2 kB
    synthesizer = "r1vision.tasks.svg.synth:synth_svg"

    def load(self, source: str | Path, split: str, opts: SVGOptions, run: RunContext):
        """Trainer rows (the trainer's resize does not change the SVG target, so the budget plays no part)."""

        return load_svg_dataset(
            source,
            split,
            columns=opts.columns,
            image_root=opts.image_root,
            prompt=opts.prompt,
            limit=opts.limit,
            **dict(opts.hub_kwargs or {}),
        )

    def rewards(self, opts: SVGOptions, run: RunContext) -> list[RewardSpec]:
        """One reward per term (``weights``), or one ``svg_visual`` (``combined``); ``judge`` adds the VLM
        judge (a dict of :class:`~.judge.JudgeConfig` fields, or ``"auto"`` to use ``GEMINI_API_KEY`` /
        ``R1VISION_JUDGE_URL`` when set)."""
        config = opts.reward_config() or RewardConfig()
        if not {**DEFAULT_WEIGHTS, **dict(opts.weights or {})}.get("colour"):
            config = replace(config, colour=False)  # a term no reward weighs is not computed
        scorer = SVGScorer(config)
        specs = make_rewards(opts.weights, combined=opts.combined, scorer=scorer)
        if opts.judge:
            from .judge import JudgeConfig, make_judge_reward

            judge = JudgeConfig.from_env() if opts.judge == "auto" else JudgeConfig(**dict(opts.judge))
            if judge is not None:
                specs.append(
                    RewardSpec("svg_judge", make_judge_reward(judge, scorer), opts.judge_weight, 0.0, 1.0)
                )
        return specs

    def sft_target(self, row: Mapping[str, Any], opts: SVGOptions, run: RunContext) -> str:
        svg = row.get("svg_gt") or row.get("response")
        if not isinstance(svg, str):
            raise KeyError("svg row has neither 'svg_gt' nor 'response'")
        return svg

    def evaluate(
        self, rows: Sequence[Mapping[str, Any]], completions: Sequence[Any], opts: SVGOptions, run: RunContext
    ) -> EvalResult:
        """Render rate, standard SSIM (``ssim_standard``), the reward terms, MSE and the worst-item contact
        sheet: :func:`~.evaluate.evaluate`."""
        return evaluate(
            rows,
            completions,
            config=opts.reward_config(),
            contact_sheet=opts.contact_sheet,
            sheet_n=opts.sheet_n,
        )
