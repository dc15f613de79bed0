"""The ``svg`` task: figure image -> SVG code (VFig), with sandboxed rendering and local visual rewards."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..base import EvalResult, RewardSpec, Task
from .prompts import PROMPT
from .render import default_pool
from .rewards import RewardConfig, SVGScorer, _gt_columns, make_rewards


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
        """Render rate, SSIM, pixel MSE, edge F1 and pixel similarity per item and aggregated.

        Failed renders score 0 in ``ssim``/``edge``/``pixel`` means; ``mse`` and the ``*_rendered`` means
        cover rendered items only. ``contact_sheet=PATH`` also draws a contact sheet of ``sheet_n`` items.
        """
        if len(rows) != len(completions):
            raise ValueError(f"{len(rows)} rows but {len(completions)} completions")
        config = kwargs.get("config")
        scorer = SVGScorer(config if isinstance(config, RewardConfig) else None)
        columns = {k: [r.get(k) for r in rows] for k in ("gt_image", "images", "svg_gt")}
        images, svgs = _gt_columns(
            {k: v for k, v in columns.items() if any(x is not None for x in v)}, len(rows)
        )
        scores = scorer.score_batch(list(completions), images, svgs)
        records = []
        for i, (row, s) in enumerate(zip(rows, scores, strict=True)):
            rec = {
                "index": i,
                "id": row.get("id", i),
                "rendered": s["reason"] is None,
                "reason": s["reason"],
                "ssim": s["ssim"],
                "pixel": s["pixel"],
                "edge": s["edge"],
                "mse": s["mse"] if s["reason"] is None else None,
                "length": s["length"],
            }
            records.append(rec)
        n = max(len(records), 1)
        ok = [r for r in records if r["rendered"]]
        metrics = {"n": float(len(records)), "render_rate": len(ok) / n}
        for key in ("ssim", "pixel", "edge"):
            metrics[key] = sum(r[key] for r in records) / n if records else 0.0
            metrics[f"{key}_rendered"] = sum(r[key] for r in ok) / len(ok) if ok else 0.0
        metrics["mse"] = sum(r["mse"] for r in ok) / len(ok) if ok else 1.0
        for reason in sorted({r["reason"] for r in records if r["reason"]}):
            metrics[f"fail_{reason}"] = sum(r["reason"] == reason for r in records) / n
        out = kwargs.get("contact_sheet")
        if out:
            contact_sheet(
                records, out, gt_images=images, completions=completions, n=int(kwargs.get("sheet_n", 16))
            )
        return EvalResult(metrics=metrics, records=records)


def _thumb(image: np.ndarray | None, cell: int):
    from PIL import Image, ImageDraw

    canvas = Image.new("RGB", (cell, cell), (235, 235, 235))
    if image is None:
        ImageDraw.Draw(canvas).line([(0, 0), (cell, cell)], fill=(200, 60, 60), width=2)
        return canvas
    im = Image.fromarray(image)
    im.thumbnail((cell, cell))
    canvas.paste(im, ((cell - im.width) // 2, (cell - im.height) // 2))
    return canvas


def contact_sheet(
    records: Sequence[dict[str, Any]],
    out_png: str | Path,
    gt_images: Sequence[Any],
    completions: Sequence[Any],
    n: int = 16,
    cell: int = 256,
    seed: int = 0,
) -> Path:
    """Draw ground truth | prediction pairs for a sample of ``n`` items (seeded), scores under each pair.

    ``records`` are :meth:`SVGTask.evaluate` records (``index``, ``ssim``, ``edge``, ``pixel``, ``reason``);
    predictions are re-rendered in the sandbox at ``cell`` size.
    """
    from PIL import Image, ImageDraw

    from .rewards import _to_rgb, canvas_size

    picks = sorted(random.Random(seed).sample(range(len(records)), min(n, len(records))))
    gts = []
    for k in picks:
        loaded = _to_rgb(gt_images[records[k]["index"]]) if gt_images else None
        gts.append(loaded[0] if loaded else None)
    sizes = [canvas_size(g.shape[1], g.shape[0], cell) if g is not None else (cell, cell) for g in gts]
    preds = default_pool().render_many(
        [completions[records[k]["index"]] for k in picks], [s[0] for s in sizes], [s[1] for s in sizes]
    )
    text_h, cols = 34, 2
    rows_n = (len(picks) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * (2 * cell + 12), max(rows_n, 1) * (cell + text_h + 8)), "white")
    draw = ImageDraw.Draw(sheet)
    for slot, (k, gt, pred) in enumerate(zip(picks, gts, preds, strict=True)):
        r = records[k]
        x0, y0 = (slot % cols) * (2 * cell + 12), (slot // cols) * (cell + text_h + 8)
        sheet.paste(_thumb(gt, cell), (x0, y0))
        sheet.paste(_thumb(pred.image, cell), (x0 + cell + 4, y0))
        draw.text((x0 + 2, y0 + cell + 2), f"#{r.get('id', r['index'])} ground truth", fill=(0, 0, 0))
        if r.get("reason"):
            label = f"FAILED: {r['reason']}"
        else:
            label = f"ssim {r['ssim']:.3f}  edge {r['edge']:.3f}  pixel {r['pixel']:.3f}"
        draw.text((x0 + cell + 6, y0 + cell + 2), label, fill=(150, 0, 0) if r.get("reason") else (0, 0, 0))
        if r.get("judge") is not None:
            draw.text((x0 + cell + 6, y0 + cell + 16), f"judge {r['judge']:.3f}", fill=(0, 0, 0))
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return out
