"""Polygon problems small enough for a tiny model to learn on a CPU (the ``demo`` preset of the synthesiser).

A filled regular polygon (triangle, square, pentagon, hexagon) on a small canvas, and one of four questions:
its number of sides, the sum of its interior angles, one interior angle, or its perimeter for a side length
given in the text. Every answer needs the image (the number of sides) and the question; the worked solution
names the sides first, then the arithmetic, then ``\\boxed{}``, in MAYE's row schema.

``exclude`` pairs (``"pentagon angle_sum"``) are drawn at ``exclude_rate`` x their natural rate (1.0: never);
``require`` pairs make every row one of them (the out-of-distribution split).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageDraw

SIDES = {"triangle": 3, "square": 4, "pentagon": 5, "hexagon": 6}
QUESTIONS = ("sides", "angle_sum", "interior", "perimeter")
COLOURS = ((200, 40, 40), (40, 150, 60), (40, 70, 200), (120, 120, 120))


def pair_name(shape: str, question: str) -> str:
    """The name a held-out pair is given by: ``"pentagon angle_sum"``."""
    return f"{shape} {question}"


def _check_pairs(pairs: Sequence[str], what: str) -> None:
    for p in pairs:
        shape, _, question = p.partition(" ")
        if shape not in SIDES or question not in QUESTIONS:
            raise ValueError(
                f"{what}: {p!r} is not '<shape> <question>' with shape in {sorted(SIDES)} and question in "
                f"{list(QUESTIONS)}"
            )


def problem(shape: str, question: str, side: int) -> tuple[str, str, str]:
    """(question text, answer, worked solution) for a regular ``shape``."""
    n = SIDES[shape]
    if question == "sides":
        return "<image>How many sides does the polygon have?", str(n), f"It has {n} sides. \\boxed{{{n}}}"
    if question == "angle_sum":
        ans = (n - 2) * 180
        q = "<image>Find the sum of the interior angles of the polygon in degrees."
        return q, str(ans), f"It has {n} sides, so the sum is $({n}-2) \\cdot 180 = {ans}$. \\boxed{{{ans}}}"
    if question == "interior":
        ans = (n - 2) * 180 // n
        q = "<image>The polygon is regular. Find one interior angle in degrees."
        return (
            q,
            str(ans),
            f"It has {n} sides, so each is $({n}-2) \\cdot 180 / {n} = {ans}$. \\boxed{{{ans}}}",
        )
    ans = n * side
    q = f"<image>The polygon is regular with side {side}. Find its perimeter."
    return q, str(ans), f"It has {n} sides, so the perimeter is ${n} \\cdot {side} = {ans}$. \\boxed{{{ans}}}"


def draw_polygon(shape: str, rng: random.Random, size: int) -> Image.Image:
    """A filled regular polygon, one vertex up, with a random colour, radius and small offset."""
    n = SIDES[shape]
    image = Image.new("RGB", (size, size), (255, 255, 255))
    r = size * rng.uniform(0.36, 0.46)
    cx = size / 2 + rng.uniform(-0.04, 0.04) * size
    cy = size / 2 + rng.uniform(-0.04, 0.04) * size
    pts = [(cx + r * math.sin(2 * math.pi * k / n), cy - r * math.cos(2 * math.pi * k / n)) for k in range(n)]
    ImageDraw.Draw(image).polygon(pts, fill=rng.choice(COLOURS), outline=(0, 0, 0))
    return image


def write_polygon_problems(
    out: Path,
    name: str,
    n: int,
    rng: random.Random,
    size: int = 84,
    exclude: Sequence[str] = (),
    exclude_rate: float = 1.0,
    require: Sequence[str] = (),
) -> Path:
    """Write ``n`` rows to ``out/{name}.jsonl`` and their images under ``out/{name}_images/``."""
    _check_pairs(exclude, "exclude")
    _check_pairs(require, "require")
    if not 0.0 <= exclude_rate <= 1.0:
        raise ValueError(f"exclude_rate must be in [0, 1], got {exclude_rate}")
    pairs = [pair_name(s, q) for s in SIDES for q in QUESTIONS]
    if require:
        pairs = list(require)
    # Each excluded pair keeps (1 - exclude_rate) of its weight: "rare", not absent, unless the rate is 1.
    weights = [(1.0 - exclude_rate) if p in exclude else 1.0 for p in pairs]
    if sum(weights) <= 0:
        raise ValueError("every pair is excluded: nothing to draw")
    image_dir = out / f"{name}_images"
    image_dir.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            shape, _, question = rng.choices(pairs, weights)[0].partition(" ")
            text, answer, solution = problem(shape, question, rng.randint(2, 9))
            rel = f"{name}_images/{i:05d}.png"
            draw_polygon(shape, rng, size).save(out / rel, optimize=False)
            row = {
                "question": text,
                "answer": answer,
                "solution": solution,
                "id": f"{name}_{i}",
                "image": rel,
                "kind": pair_name(shape, question),
            }
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
