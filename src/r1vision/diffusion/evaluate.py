"""Scoring generated images and drawing contact sheets (training's evaluation and ``r1vision t2i-eval``).

Each image gets a record: its index and prompt, every reward's value, the weighted ``reward`` and, under
an OCR reward, the ``target`` (the quoted text), what was ``read`` and whether it matched. Metrics come from
the records (so records gathered from several processes give the metrics of the whole set): each reward's
mean, the weighted ``reward``, and for an OCR reward Flow-GRPO's OCR accuracy (the reward's mean),
``exact_match`` (the normalised text read equals the target) and ``edit_similarity`` (``1 - distance /
max(len)``). Contact sheets show images with their prompt, target, text read and score, 64 to a page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from r1vision.diffusion.rewards.ocr import OCRReward, _norm, edit_similarity, target_text

PAGE = 64  # images per contact-sheet page


def _finite(value: Any) -> bool:
    return value is not None and not math.isnan(float(value))


def score_records(
    funcs: Sequence[Callable],
    weights: Sequence[float],
    prompts: list[str],
    images: list[Any],
    rows: list[dict],
    indices: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """One record per image (see the module docstring); ``indices``: the images' places in the whole set."""
    indices = list(indices) if indices is not None else list(range(len(images)))
    columns = {k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"} if rows else {}
    records: list[dict[str, Any]] = [
        {"index": int(i), "prompt": p, "rewards": {}} for i, p in zip(indices, prompts, strict=True)
    ]
    totals: list[float | None] = [None] * len(images)
    for func, weight in zip(funcs, weights, strict=True):
        name = getattr(func, "__name__", type(func).__name__)
        values = func(prompts=prompts, images=images, **columns) if images else []
        for i, value in enumerate(values):
            good = _finite(value)
            records[i]["rewards"][name] = float(value) if good else None
            if good:
                totals[i] = (totals[i] or 0.0) + weight * float(value)
        inner = getattr(func, "__wrapped__", func)  # held to its range by r1vision.rewards.guard_reward
        if isinstance(inner, OCRReward):
            for record, read in zip(records, inner.last_reads, strict=True):
                target = target_text(record["prompt"])
                record["read"] = read
                record["target"] = target
                if target is not None:
                    record["exact_match"] = _norm(read) == _norm(target)
                    record["edit_similarity"] = edit_similarity(read, target)
    for record, total in zip(records, totals, strict=True):
        record["reward"] = total
    return records


def summarize(records: Sequence[dict[str, Any]], reward_names: Sequence[str]) -> dict[str, float]:
    """The metrics of a set of records (in any order, from any number of processes)."""
    metrics: dict[str, float] = {}
    for name in reward_names:
        values = [r["rewards"].get(name) for r in records if _finite(r["rewards"].get(name))]
        metrics[name] = sum(values) / len(values) if values else math.nan
    ocr = [r for r in records if r.get("target") is not None]
    if ocr:
        ocr_name = next((n for n in reward_names if n.startswith("ocr")), None)
        if ocr_name is not None:
            metrics["ocr_accuracy"] = metrics[ocr_name]
        metrics["exact_match"] = sum(bool(r["exact_match"]) for r in ocr) / len(ocr)
        metrics["edit_similarity"] = sum(float(r["edit_similarity"]) for r in ocr) / len(ocr)
    scored = [float(r["reward"]) for r in records if _finite(r.get("reward"))]
    metrics["reward"] = sum(scored) / len(scored) if scored else math.nan
    metrics["num_images"] = float(len(records))
    return metrics


def caption(record: dict[str, Any]) -> str:
    """Two lines under an image: the prompt, then the target and text read (OCR) and the scores."""
    parts = []
    if record.get("target") is not None:
        parts.append(f"want {record['target']!r} read {str(record.get('read', ''))[:24]!r}")
    parts += [f"{name} {value:.2f}" for name, value in record["rewards"].items() if value is not None]
    return f"{record['prompt'][:48]}\n" + " | ".join(parts)


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
    for i, (image, text) in enumerate(zip(images, captions, strict=True)):
        x, y = (i % columns) * cell, (i // columns) * (cell + caption_h)
        sheet.paste(image.convert("RGB").resize((cell, cell)), (x, y))
        draw.multiline_text((x + 3, y + cell + 2), text, fill="black", spacing=2)
    sheet.save(path)
    return path


def contact_sheets(images: list[Any], records: Sequence[dict[str, Any]], folder: str | Path) -> list[Path]:
    """``contact_sheet.png`` for the first page, then ``contact_sheet_2.png``, ... (``PAGE`` images each)."""
    paths = []
    for page, low in enumerate(range(0, len(images), PAGE), 1):
        name = "contact_sheet.png" if page == 1 else f"contact_sheet_{page}.png"
        chunk = images[low : low + PAGE]
        paths.append(
            contact_sheet(chunk, [caption(r) for r in records[low : low + len(chunk)]], Path(folder) / name)
        )
    return paths


def write_evaluation(
    records: Sequence[dict[str, Any]], images: list[Any], folder: str | Path, reward_names: Sequence[str]
) -> dict[str, float]:
    """``records.jsonl`` (sorted by index), ``metrics.json`` and the contact sheets of ``images`` (the first
    records' images) in ``folder``; returns the metrics."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    records = sorted(records, key=lambda r: r["index"])
    metrics = summarize(records, reward_names)
    tmp = folder / "records.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(folder / "records.jsonl")
    if images:
        contact_sheets(images, records[: len(images)], folder)
    return metrics
