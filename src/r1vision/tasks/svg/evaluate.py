"""Evaluation of the ``svg`` task: render rate, SSIM, pixel and edge scores per item, and a contact sheet."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..base import EvalResult
from .render import default_pool
from .rewards import RewardConfig, SVGScorer, _gt_columns


def evaluate_svg(rows: Sequence[dict[str, Any]], completions: Sequence[str], **kwargs: Any) -> EvalResult:
    """Render rate, SSIM, pixel MSE, edge F1 and pixel similarity per item and aggregated.

    Failed renders score 0 in ``ssim``/``edge``/``pixel`` means; ``mse`` and the ``*_rendered`` means
    cover rendered items only. ``contact_sheet=PATH`` also draws a contact sheet of ``sheet_n`` items.
    """
    if len(rows) != len(completions):
        raise ValueError(f"{len(rows)} rows but {len(completions)} completions")
    config = kwargs.get("config")
    scorer = SVGScorer(config if isinstance(config, RewardConfig) else None)
    columns = {k: [r.get(k) for r in rows] for k in ("gt_image", "images", "svg_gt")}
    images, svgs = _gt_columns({k: v for k, v in columns.items() if any(x is not None for x in v)}, len(rows))
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
