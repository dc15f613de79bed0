"""Scoring generated images and drawing contact sheets (training's evaluation and ``r1vision t2i-eval``).

Metrics: each reward's mean, the weighted ``reward``, and for an OCR reward Flow-GRPO's OCR accuracy (the
reward's mean), ``exact_match`` (the normalised text read equals the target) and ``edit_similarity``
(``1 - distance / max(len)``). The contact sheet shows every image with its prompt, the target and the
text read, and the score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from r1vision.diffusion.rewards.ocr import OCRReward, _norm, edit_similarity, target_text


def score_images(
    funcs: Sequence[Callable],
    weights: Sequence[float],
    prompts: list[str],
    images: list[Any],
    rows: list[dict],
) -> tuple[dict[str, float], list[str]]:
    """(metrics, one caption per image)."""
    columns = {k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"} if rows else {}
    per_image: list[list[str]] = [[] for _ in images]
    totals = [0.0] * len(images)
    seen = [False] * len(images)
    metrics: dict[str, float] = {}
    for func, weight in zip(funcs, weights, strict=True):
        name = getattr(func, "__name__", type(func).__name__)
        values = func(prompts=prompts, images=images, **columns)
        finite = [v for v in values if v is not None and not math.isnan(float(v))]
        metrics[name] = sum(finite) / len(finite) if finite else math.nan
        for i, v in enumerate(values):
            if v is not None and not math.isnan(float(v)):
                totals[i] += weight * float(v)
                seen[i] = True
                per_image[i].append(f"{name} {float(v):.2f}")
        if isinstance(func, OCRReward):
            reads = func.last_reads
            targets = [target_text(p) for p in prompts]
            pairs = [(r, t) for r, t in zip(reads, targets, strict=True) if t is not None]
            metrics["ocr_accuracy"] = metrics[name]
            metrics["exact_match"] = sum(_norm(r) == _norm(t) for r, t in pairs) / max(len(pairs), 1)
            metrics["edit_similarity"] = sum(edit_similarity(r, t) for r, t in pairs) / max(len(pairs), 1)
            for i, (read, target) in enumerate(zip(reads, targets, strict=True)):
                per_image[i].insert(0, f"want {target!r} read {read[:24]!r}")
    scored = [t for t, s in zip(totals, seen, strict=True) if s]
    metrics["reward"] = sum(scored) / len(scored) if scored else math.nan
    metrics["num_images"] = float(len(images))
    captions = [f"{p[:48]}\n" + " | ".join(c) for p, c in zip(prompts, per_image, strict=True)]
    return metrics, captions


def contact_sheet(
    images: list[Any], captions: list[str], path: str | Path, columns: int = 4, cell: int = 192
) -> Path:
    """A grid of the images (scaled to ``cell`` px) with their captions under them."""
    from PIL import Image, ImageDraw

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = max(1, math.ceil(len(images) / columns))
    caption_h = 44
    sheet = Image.new("RGB", (columns * cell, rows * (cell + caption_h)), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (image, caption) in enumerate(zip(images, captions, strict=True)):
        x, y = (i % columns) * cell, (i // columns) * (cell + caption_h)
        sheet.paste(image.convert("RGB").resize((cell, cell)), (x, y))
        draw.multiline_text((x + 3, y + cell + 2), caption, fill="black", spacing=2)
    sheet.save(path)
    return path
