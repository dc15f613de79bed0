"""Synthetic data for the built-in ``color`` task: one coloured shape per image, "name its colour"."""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

from r1vision.tasks.shapes import COLORS, SHAPES, draw_shape


def synth_color(out_dir: str | Path, n: int, seed: int = 0, split: str = "train", size: int = 56) -> Path:
    """Write ``n`` rows to ``out_dir/{split}.jsonl`` with PNGs under ``out_dir/images/``; return the jsonl path.

    Each row: ``{"id", "image": "images/<split>_<i>.png", "question", "answer", "shape"}``; image paths are
    relative to the jsonl file, as in most local VLM datasets. Deterministic for a seed.
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    rng = random.Random(f"color-{seed}-{split}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    path = out / f"{split}.jsonl"
    with path.open("w") as f:
        for i in range(n):
            color = rng.choice(sorted(COLORS))
            shape = rng.choice(SHAPES)
            side = rng.randint(size // 2, size - 4)
            x = rng.randint(0, size - side)
            y = rng.randint(0, size - side)
            background = tuple(rng.randint(225, 255) for _ in range(3))
            img = Image.new("RGB", (size, size), background)
            draw_shape(ImageDraw.Draw(img), shape, (x, y, x + side - 1, y + side - 1), COLORS[color])
            rel = f"images/{split}_{i:05d}.png"
            img.save(out / rel)
            row = {
                "id": f"color-{split}-{i}",
                "image": rel,
                "question": f"What colour is the {shape}?",
                "answer": color,
                "shape": shape,
            }
            f.write(json.dumps(row) + "\n")
    return path
