"""The ``svg`` task: figure image -> SVG code (VFig), with sandboxed rendering and local visual rewards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import EvalResult, RewardSpec, Task
from .evaluate import evaluate_svg
from .prompts import PROMPT
from .rewards import RewardConfig, SVGScorer, make_rewards


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class SVGOptions:
    """Options of the ``svg`` task (``--task_options``)."""

    columns: dict[str, str] | None = field(
        default=None, metadata=_help('{"image": col, "svg": col}: any dataset instead of the VFig schema')
    )
    image_root: str | Path | None = field(
        default=None, metadata=_help("folder relative image paths resolve against")
    )
    prompt: str = field(default=PROMPT, metadata=_help("the instruction (mapped columns only)"))
    limit: int | None = field(default=None, metadata=_help("use the first N rows"))
    hub_kwargs: dict[str, Any] | None = field(
        default=None, metadata=_help("extra datasets.load_dataset arguments")
    )
    weights: dict[str, float] | None = field(default=None, metadata=_help("reward term -> weight"))
    combined: bool = field(default=False, metadata=_help("one svg_visual reward instead of one per term"))
    config: Any = field(
        default=None, metadata=_help("RewardConfig fields as a dict (render size, blur, ...)")
    )
    judge: Any = field(default=None, metadata=_help('"auto", or JudgeConfig fields as a dict: add svg_judge'))
    judge_weight: float = field(default=1.0, metadata=_help("weight of svg_judge"))
    contact_sheet: str | None = field(default=None, metadata=_help("eval: PNG of ground truth vs prediction"))
    sheet_n: int = field(default=16, metadata=_help("eval: items on the contact sheet"))


_LOAD_OPTIONS = ("columns", "image_root", "prompt", "limit")


class SVGTask(Task):
    """Image -> SVG. Rewards: ``svg_valid``, ``svg_pixel``, ``svg_ssim``, ``svg_edge`` (+ optional
    ``svg_length`` and ``svg_judge``)."""

    name = "svg"
    description = "Convert a figure image into SVG code (VFig); rendered in a sandbox and compared visually."
    Options = SVGOptions

    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        from r1vision.tasks.svg.synth import synth_svg

        return synth_svg(out_dir, n, seed=seed, split=split, **kwargs)

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        from .data import load_svg_dataset

        self.check_options(kwargs)
        options = {k: v for k, v in kwargs.items() if k in _LOAD_OPTIONS}
        return load_svg_dataset(source, split, **options, **dict(kwargs.get("hub_kwargs") or {}))

    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        """Options: ``weights`` (term -> weight), ``combined`` (one ``svg_visual`` reward), ``config``
        (:class:`RewardConfig` or a dict of its fields), ``judge`` (a :class:`~.judge.JudgeConfig`, a dict of
        its fields, or ``"auto"`` to use ``GEMINI_API_KEY`` / ``R1VISION_JUDGE_URL`` when set) and
        ``judge_weight``."""
        self.check_options(kwargs)
        config = kwargs.get("config")
        if isinstance(config, dict):
            config = RewardConfig(**config)
        scorer = SVGScorer(config)
        specs = make_rewards(kwargs.get("weights"), combined=bool(kwargs.get("combined")), scorer=scorer)
        judge = kwargs.get("judge")
        if judge:
            from .judge import JudgeConfig, make_judge_reward

            if judge == "auto":
                judge = JudgeConfig.from_env()
            elif isinstance(judge, dict):
                judge = JudgeConfig(**judge)
            if judge is not None:
                func = make_judge_reward(judge, scorer)
                specs.append(RewardSpec("svg_judge", func, float(kwargs.get("judge_weight", 1.0)), 0.0, 1.0))
        return specs

    def completion_text(self, row: dict[str, Any], **kwargs: Any) -> str:
        svg = row.get("svg_gt") or row.get("response")
        if not isinstance(svg, str):
            raise KeyError("svg row has neither 'svg_gt' nor 'response'")
        return svg

    def evaluate(
        self, rows: Sequence[dict[str, Any]], completions: Sequence[str], **kwargs: Any
    ) -> EvalResult:
        """Render rate, standard SSIM (``ssim_standard``), the reward terms, MSE and the worst-item contact
        sheet: :func:`~.evaluate.evaluate_svg`."""
        return evaluate_svg(rows, completions, **kwargs)
