"""The ``svg`` task: figure image -> SVG code (VFig), with sandboxed rendering and local visual rewards."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..base import EvalResult, RewardSpec, Task
from .rewards import RewardConfig, SVGScorer, make_rewards


class SVGTask(Task):
    """Image -> SVG. Rewards: ``svg_valid``, ``svg_pixel``, ``svg_ssim``, ``svg_edge`` (+ optional
    ``svg_length`` and ``svg_judge``)."""

    name = "svg"
    description = "Convert a figure image into SVG code (VFig); rendered in a sandbox and compared visually."

    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        from r1vision.synthetic.svg import synth_svg

        return synth_svg(out_dir, n, seed=seed, split=split, **kwargs)

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        from .data import load_svg_dataset

        return load_svg_dataset(source, split, **kwargs)

    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        """Options: ``weights`` (term -> weight), ``combined`` (one ``svg_visual`` reward), ``config``
        (:class:`RewardConfig` or a dict of its fields), ``judge`` (a :class:`~.judge.JudgeConfig`, a dict of
        its fields, or ``"auto"`` to use ``GEMINI_API_KEY`` / ``R1VISION_JUDGE_URL`` when set) and
        ``judge_weight``."""
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
        """Render rate, standard SSIM (``ssim_standard``), the reward terms, MSE; per item and aggregated.

        ``contact_sheet=PATH`` also draws the ``sheet_n`` worst items under a summary (see
        :mod:`.evaluate`)."""
        from .evaluate import evaluate

        config = kwargs.get("config")
        return evaluate(
            rows,
            completions,
            config=config if isinstance(config, RewardConfig) else None,
            contact_sheet=kwargs.get("contact_sheet"),
            sheet_n=int(kwargs.get("sheet_n", 16)),
        )
