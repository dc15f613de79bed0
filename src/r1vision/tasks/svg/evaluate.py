"""Evaluation of image -> SVG predictions: standard metrics under their own names, and a contact sheet.

Per item and aggregated:

- ``ssim_standard``: the SSIM VFig's evaluation reports (:func:`.score.standard_ssim`: scikit-image,
  per-channel RGB, default window and constants), at the ground truth's own resolution (longest side capped
  at 2048) with the prediction rendered at that size. White space counts, so even an empty page scores well
  on a sparse figure; compare it across systems, not against the reward.
- ``mse``: mean squared RGB error in [0, 1] at the same resolution, rendered items only.
- ``ssim_reward``, ``pixel``, ``edge``: the reward terms (:mod:`.score`; ink-based, an empty page ~0) on the
  reward's comparison canvas (``RewardConfig.size``). ``reward``: the default-weighted ``svg_visual`` value
  (:data:`.rewards.DEFAULT_WEIGHTS`), used to rank items for the contact sheet.

Failed renders score 0 in the means (``mse`` excepted); the ``*_rendered`` means cover rendered items only.
Both passes render and score in the sandbox workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..base import EvalResult
from .render import default_pool
from .rewards import DEFAULT_WEIGHTS, RewardConfig, SVGScorer, canvas_size, content_hash, gt_columns, to_rgb

METRICS = ("ssim_standard", "ssim_reward", "pixel", "edge", "colour")


def evaluate(
    rows: Sequence[dict[str, Any]],
    completions: Sequence[Any],
    config: RewardConfig | None = None,
    contact_sheet: str | Path | None = None,
    sheet_n: int = 16,
) -> EvalResult:
    """Metrics of ``completions`` against the rows' ground truths (see the module docstring)."""
    if len(rows) != len(completions):
        raise ValueError(f"{len(rows)} rows but {len(completions)} completions")
    scorer = SVGScorer(config if isinstance(config, RewardConfig) else None)
    columns = {k: [r.get(k) for r in rows] for k in ("gt_image", "images", "svg_gt")}
    images, svgs = gt_columns({k: v for k, v in columns.items() if any(x is not None for x in v)}, len(rows))
    scores = scorer.score_batch(list(completions), images, svgs)
    native = _native_metrics(scorer, completions, images, svgs, [s["reason"] is None for s in scores])
    total_w = sum(DEFAULT_WEIGHTS.values())
    records = []
    for i, (row, s) in enumerate(zip(rows, scores, strict=True)):
        ok = s["reason"] is None and i in native
        records.append(
            {
                "index": i,
                "id": row.get("id", i),
                "rendered": ok,
                "reason": s["reason"] or (None if ok else "native_render_failed"),
                "ssim_standard": native[i]["ssim_standard"] if ok else 0.0,
                "ssim_reward": s["ssim"],
                "pixel": s["pixel"],
                "edge": s["edge"],
                "colour": s["colour"],
                "mse": native[i]["mse"] if ok else None,
                "length": s["length"],
                "reward": sum(w * s[t] for t, w in DEFAULT_WEIGHTS.items()) / total_w,
            }
        )
    metrics = summarise(records)
    if contact_sheet:
        draw_contact_sheet(records, metrics, contact_sheet, images, completions, n=sheet_n)
    return EvalResult(metrics=metrics, records=records)


def _native_metrics(scorer: SVGScorer, completions, images, svgs, rendered: list[bool]) -> dict[int, dict]:
    """``{index: {"mse", "ssim_standard", ...}}`` at each ground truth's own resolution, for the items that
    rendered on the reward canvas."""
    todo, targets = [], []
    for i, ok in enumerate(rendered):
        gt = (
            scorer.native_ground_truth(images[i], svgs[i] if isinstance(svgs[i], str) else None)
            if ok
            else None
        )
        if gt is not None:
            todo.append(i)
            targets.append(gt)
    results = scorer.pool.render_many(
        [completions[i] for i in todo],
        [t.shape[1] for t in targets],
        [t.shape[0] for t in targets],
        timeout_s=scorer.config.timeout_s,
        gts=[(f"native:{content_hash(t.tobytes())}:{t.shape}", t) for t in targets],
        score=scorer.config.compare_fields(),
        extras=True,
    )
    return {i: r.scores for i, r in zip(todo, results, strict=True) if r.ok and r.scores is not None}


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Aggregate metrics of :func:`evaluate` records."""
    n = max(len(records), 1)
    ok = [r for r in records if r["rendered"]]
    metrics = {"n": float(len(records)), "render_rate": len(ok) / n}
    for key in (*METRICS, "reward"):
        metrics[key] = sum(r[key] for r in records) / n if records else 0.0
        metrics[f"{key}_rendered"] = sum(r[key] for r in ok) / len(ok) if ok else 0.0
    metrics["mse"] = sum(r["mse"] for r in ok) / len(ok) if ok else 1.0
    for reason in sorted({r["reason"] for r in records if r["reason"]}):
        metrics[f"fail_{reason}"] = sum(r["reason"] == reason for r in records) / n
    return metrics


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


def worst(records: Sequence[dict[str, Any]], n: int) -> list[int]:
    """Indices (into ``records``) of the ``n`` lowest-reward items, failures first, ties by position."""
    order = sorted(range(len(records)), key=lambda k: (records[k]["rendered"], records[k]["reward"], k))
    return order[: max(0, n)]


def draw_contact_sheet(
    records: Sequence[dict[str, Any]],
    metrics: dict[str, float],
    out_png: str | Path,
    gt_images: Sequence[Any],
    completions: Sequence[Any],
    n: int = 16,
    cell: int = 256,
) -> Path:
    """Ground truth | prediction pairs of the ``n`` worst items (by reward), under a summary band.

    Predictions are re-rendered in the sandbox at ``cell`` size.
    """
    from PIL import Image, ImageDraw

    picks = worst(records, n)
    gts = []
    for k in picks:
        loaded = to_rgb(gt_images[records[k]["index"]]) if gt_images else None
        gts.append(loaded[0] if loaded else None)
    sizes = [canvas_size(g.shape[1], g.shape[0], cell) if g is not None else (cell, cell) for g in gts]
    preds = default_pool().render_many(
        [completions[records[k]["index"]] for k in picks], [s[0] for s in sizes], [s[1] for s in sizes]
    )
    head, text_h, cols = 40, 34, 2
    rows_n = (len(picks) + cols - 1) // cols
    width = cols * (2 * cell + 12)
    sheet = Image.new("RGB", (width, head + max(rows_n, 1) * (cell + text_h + 8)), "white")
    draw = ImageDraw.Draw(sheet)
    draw.text(
        (4, 4),
        f"{len(picks)} worst of {int(metrics['n'])} by reward | render rate {metrics['render_rate']:.3f} | "
        f"SSIM (standard) {metrics['ssim_standard']:.3f} | reward {metrics['reward']:.3f}",
        fill=(0, 0, 0),
    )
    draw.text(
        (4, 20),
        f"ssim_reward {metrics['ssim_reward']:.3f}  pixel {metrics['pixel']:.3f}  edge {metrics['edge']:.3f}"
        f"  mse {metrics['mse']:.4f}",
        fill=(0, 0, 0),
    )
    for slot, (k, gt, pred) in enumerate(zip(picks, gts, preds, strict=True)):
        r = records[k]
        x0, y0 = (slot % cols) * (2 * cell + 12), head + (slot // cols) * (cell + text_h + 8)
        sheet.paste(_thumb(gt, cell), (x0, y0))
        sheet.paste(_thumb(pred.image, cell), (x0 + cell + 4, y0))
        draw.text((x0 + 2, y0 + cell + 2), f"#{r.get('id', r['index'])} ground truth", fill=(0, 0, 0))
        if r.get("reason"):
            label = f"FAILED: {r['reason']}"
        else:
            label = f"reward {r['reward']:.3f}  SSIM {r['ssim_standard']:.3f}  edge {r['edge']:.3f}"
        draw.text((x0 + cell + 6, y0 + cell + 2), label, fill=(150, 0, 0) if r.get("reason") else (0, 0, 0))
        if r.get("judge") is not None:
            draw.text((x0 + cell + 6, y0 + cell + 16), f"judge {r['judge']:.3f}", fill=(0, 0, 0))
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return out
