"""Synthetic geometry problems in MAYE's layout: drawn diagrams with exactly computed answers.

``synth_geometry(out, n, seed, split)`` writes ``out/geometry_synth_{rl,validation,test}_v0.jsonl`` (the
training split is called ``rl``, as in MAYE) and PNGs under ``out/geometry_synth_images/``. Each row:
``{"question": "<image>...", "answer": "5\\\\sqrt{2}", "solution": "... \\\\boxed{5\\\\sqrt{2}}", "id", "image"}``.

Problem kinds: Pythagoras (hypotenuse or leg, surd answers), the third angle of a triangle, angles at
parallel lines cut by a transversal, circle area/circumference (multiples of pi), triangle area from
base and height (fractions) and isosceles base angles (degrees). Deterministic for ``(seed, split)``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from r1vision.tasks.loading import canonical_split

SIZE = 336  # a multiple of 28 and 32, so no resize rounding for any Qwen-VL family
Point = tuple[float, float]


def surd(n: int) -> tuple[int, int]:
    """``sqrt(n) = k * sqrt(m)`` with ``m`` square-free; returns ``(k, m)``."""
    k, m, f = 1, n, 2
    while f * f <= m:
        while m % (f * f) == 0:
            k, m = k * f, m // (f * f)
        f += 1
    return k, m


def latex_surd(n: int) -> str:
    """LaTeX of ``sqrt(n)`` in simplest form: ``5``, ``\\sqrt{7}``, ``2\\sqrt{3}``."""
    k, m = surd(n)
    if m == 1:
        return str(k)
    return f"\\sqrt{{{m}}}" if k == 1 else f"{k}\\sqrt{{{m}}}"


def latex_fraction(value: Fraction) -> str:
    """``7`` or ``\\frac{7}{2}`` (negative sign in front)."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def latex_degrees(value: Fraction) -> str:
    """Degrees as written in answers: ``70`` or ``47.5`` (halves are exact decimals)."""
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


class _Canvas:
    def __init__(self, rng: random.Random) -> None:
        self.image = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
        self.draw = ImageDraw.Draw(self.image)
        self.font = ImageFont.load_default(size=18)
        self.rng = rng

    def line(self, a: Point, b: Point, width: int = 2, dash: bool = False) -> None:
        if not dash:
            self.draw.line([a, b], fill=(0, 0, 0), width=width)
            return
        length = math.dist(a, b)
        steps = max(1, int(length // 8))
        for i in range(0, steps, 2):
            t0, t1 = i / steps, min(1.0, (i + 1) / steps)
            p = (a[0] + (b[0] - a[0]) * t0, a[1] + (b[1] - a[1]) * t0)
            q = (a[0] + (b[0] - a[0]) * t1, a[1] + (b[1] - a[1]) * t1)
            self.draw.line([p, q], fill=(0, 0, 0), width=1)

    def label(self, text: str, at: Point, color: tuple[int, int, int] = (0, 0, 160)) -> None:
        self.draw.text(at, text, fill=color, font=self.font, anchor="mm")

    def edge_label(self, text: str, a: Point, b: Point, inside: Point, offset: float = 16) -> None:
        """Label the midpoint of segment ab on the side away from ``inside``."""
        mid = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
        nx, ny = b[1] - a[1], a[0] - b[0]
        norm = math.hypot(nx, ny) or 1.0
        nx, ny = nx / norm, ny / norm
        if (inside[0] - mid[0]) * nx + (inside[1] - mid[1]) * ny > 0:
            nx, ny = -nx, -ny
        self.label(text, (mid[0] + nx * offset, mid[1] + ny * offset))


def _fit(points: list[Point], rng: random.Random, margin: int = 48) -> list[Point]:
    """Rotate by a random angle and scale/translate ``points`` into the canvas (y down)."""
    angle = rng.uniform(-0.4, 0.4)
    c, s = math.cos(angle), math.sin(angle)
    rotated = [(x * c - y * s, -(x * s + y * c)) for x, y in points]  # flip y: maths axes to pixels
    xs, ys = [p[0] for p in rotated], [p[1] for p in rotated]
    span = max(max(xs) - min(xs), max(ys) - min(ys)) or 1.0
    scale = (SIZE - 2 * margin) / span
    ox = (SIZE - (max(xs) - min(xs)) * scale) / 2 - min(xs) * scale
    oy = (SIZE - (max(ys) - min(ys)) * scale) / 2 - min(ys) * scale
    return [(x * scale + ox, y * scale + oy) for x, y in rotated]


def _polygon(canvas: _Canvas, pts: list[Point]) -> Point:
    for i in range(len(pts)):
        canvas.line(pts[i], pts[(i + 1) % len(pts)])
    return (sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts))


def _right_marker(canvas: _Canvas, corner: Point, a: Point, b: Point, size: float = 12) -> None:
    ua = ((a[0] - corner[0]) / math.dist(a, corner), (a[1] - corner[1]) / math.dist(a, corner))
    ub = ((b[0] - corner[0]) / math.dist(b, corner), (b[1] - corner[1]) / math.dist(b, corner))
    p = (corner[0] + ua[0] * size, corner[1] + ua[1] * size)
    q = (corner[0] + ub[0] * size, corner[1] + ub[1] * size)
    r = (p[0] + ub[0] * size, p[1] + ub[1] * size)
    canvas.line(p, r, width=1)
    canvas.line(q, r, width=1)


def _pythagoras(rng: random.Random, canvas: _Canvas) -> tuple[str, str, str]:
    a = rng.randint(2, 12)
    find_hypotenuse = rng.random() < 0.5
    if find_hypotenuse:
        b = rng.randint(2, 12)
        hyp2, leg2 = a * a + b * b, b * b
    else:
        c = rng.randint(a + 1, a + 8)
        hyp2, leg2 = c * c, c * c - a * a
    pts = _fit([(0, 0), (a, 0), (0, math.sqrt(leg2))], rng)
    centre = _polygon(canvas, pts)
    _right_marker(canvas, pts[0], pts[1], pts[2])
    canvas.edge_label(str(a), pts[0], pts[1], centre)
    if find_hypotenuse:
        canvas.edge_label(latex_plain_surd(leg2), pts[0], pts[2], centre)
        canvas.edge_label("x", pts[1], pts[2], centre)
        answer = latex_surd(hyp2)
        steps = f"x = \\sqrt{{{a}^2 + {math.isqrt(leg2)}^2}} = \\sqrt{{{hyp2}}}"
    else:
        canvas.edge_label("x", pts[0], pts[2], centre)
        canvas.edge_label(latex_plain_surd(hyp2), pts[1], pts[2], centre)
        answer = latex_surd(leg2)
        steps = f"x = \\sqrt{{{math.isqrt(hyp2)}^2 - {a}^2}} = \\sqrt{{{leg2}}}"
    if answer != f"\\sqrt{{{hyp2 if find_hypotenuse else leg2}}}":
        steps += f" = {answer}"
    question = "<image>The triangle has a right angle as marked. Find x."
    return question, answer, f"By the Pythagorean theorem, ${steps}$. \\boxed{{{answer}}}"


def latex_plain_surd(n: int) -> str:
    """A label for a length sqrt(n) as drawn on a figure (``√13`` or ``5``)."""
    k, m = surd(n)
    if m == 1:
        return str(k)
    return f"√{m}" if k == 1 else f"{k}√{m}"


def _triangle_angles(rng: random.Random, canvas: _Canvas) -> tuple[str, str, str]:
    a = rng.randint(25, 100)
    b = rng.randint(25, 150 - a)
    c = 180 - a - b
    pa, pb = (0.0, 0.0), (10.0, 0.0)
    # place C from the two base angles
    ta, tb = math.radians(a), math.radians(b)
    t = 10 * math.sin(tb) / math.sin(ta + tb)
    pc = (t * math.cos(ta), t * math.sin(ta))
    pts = _fit([pa, pb, pc], rng)
    centre = _polygon(canvas, pts)
    for p, text in zip(pts, (f"{a}°", f"{b}°", "x"), strict=True):
        canvas.label(text, (p[0] + (centre[0] - p[0]) * 0.28, p[1] + (centre[1] - p[1]) * 0.28))
    for p, name in zip(pts, "ABC", strict=True):
        canvas.label(name, (p[0] + (p[0] - centre[0]) * 0.15, p[1] + (p[1] - centre[1]) * 0.15), (0, 0, 0))
    question = "<image>Find x, the measure of angle C in degrees."
    solution = f"The angles of a triangle sum to $180^\\circ$, so $x = 180 - {a} - {b} = {c}$. \\boxed{{{c}}}"
    return question, str(c), solution


def _parallel(rng: random.Random, canvas: _Canvas) -> tuple[str, str, str]:
    theta = rng.randint(35, 145)  # angle between the lines and the transversal (above-right)
    y1, y2 = SIZE * 0.35, SIZE * 0.68
    canvas.line((30, y1), (SIZE - 30, y1))
    canvas.line((30, y2), (SIZE - 30, y2))
    dx = (y2 - y1) / math.tan(math.radians(theta))
    x1 = SIZE / 2 + dx / 2
    x2 = SIZE / 2 - dx / 2
    ext = 60 / (y2 - y1)
    canvas.line((x2 - (x1 - x2) * ext, y2 + (y2 - y1) * ext), (x1 + (x1 - x2) * ext, y1 - (y2 - y1) * ext))
    canvas.label("l", (SIZE - 20, y1), (0, 0, 0))
    canvas.label("m", (SIZE - 20, y2), (0, 0, 0))
    quads = {"above-right": (1, -1), "above-left": (-1, -1), "below-left": (-1, 1), "below-right": (1, 1)}
    value = {"above-right": theta, "below-left": theta, "above-left": 180 - theta, "below-right": 180 - theta}
    given, asked = rng.choice(sorted(quads)), rng.choice(sorted(quads))
    gx, gy = quads[given]
    ax, ay = quads[asked]
    canvas.label(f"{value[given]}°", (x1 + gx * 34, y1 + gy * 16))
    canvas.label("x", (x2 + ax * 26, y2 + ay * 16))
    answer = value[asked]
    same = value[asked] == value[given]
    reason = "the angles are equal" if same else "the angles are supplementary"
    calc = f"x = {answer}" if same else f"x = 180 - {value[given]} = {answer}"
    question = "<image>Lines l and m are parallel. Find x in degrees."
    return question, str(answer), f"Since l ∥ m, {reason}, so ${calc}$. \\boxed{{{answer}}}"


def _circle(rng: random.Random, canvas: _Canvas) -> tuple[str, str, str]:
    r = rng.randint(2, 15)
    c, radius = (SIZE / 2, SIZE / 2), SIZE * 0.34
    canvas.draw.ellipse(
        [c[0] - radius, c[1] - radius, c[0] + radius, c[1] + radius], outline=(0, 0, 0), width=2
    )
    angle = rng.uniform(0, 2 * math.pi)
    end = (c[0] + radius * math.cos(angle), c[1] + radius * math.sin(angle))
    canvas.line(c, end)
    canvas.draw.ellipse([c[0] - 3, c[1] - 3, c[0] + 3, c[1] + 3], fill=(0, 0, 0))
    canvas.edge_label(str(r), c, end, (c[0] - math.sin(angle), c[1] + math.cos(angle)))
    if rng.random() < 0.5:
        answer = f"{r * r}\\pi"
        return (
            "<image>Find the area of the circle. Give the exact answer in terms of π.",
            answer,
            f"$A = \\pi r^2 = \\pi \\cdot {r}^2 = {answer}$. \\boxed{{{answer}}}",
        )
    answer = f"{2 * r}\\pi"
    return (
        "<image>Find the circumference of the circle. Give the exact answer in terms of π.",
        answer,
        f"$C = 2\\pi r = 2\\pi \\cdot {r} = {answer}$. \\boxed{{{answer}}}",
    )


def _triangle_area(rng: random.Random, canvas: _Canvas) -> tuple[str, str, str]:
    base, height = rng.randint(3, 15), rng.randint(3, 15)
    apex_x = rng.uniform(0.2, 0.8) * base
    pts = _fit([(0, 0), (base, 0), (apex_x, height)], rng)
    centre = _polygon(canvas, pts)
    foot = (
        pts[0][0] + (pts[1][0] - pts[0][0]) * apex_x / base,
        pts[0][1] + (pts[1][1] - pts[0][1]) * apex_x / base,
    )
    canvas.line(pts[2], foot, dash=True)
    _right_marker(canvas, foot, pts[1], pts[2], size=9)
    canvas.edge_label(str(base), pts[0], pts[1], centre)
    canvas.label(str(height), ((pts[2][0] + foot[0]) / 2 + 12, (pts[2][1] + foot[1]) / 2))
    area = Fraction(base * height, 2)
    answer = latex_fraction(area)
    return (
        "<image>Find the area of the triangle.",
        answer,
        f"$A = \\frac{{1}}{{2}} \\cdot {base} \\cdot {height} = {answer}$. \\boxed{{{answer}}}",
    )


def _isosceles(rng: random.Random, canvas: _Canvas) -> tuple[str, str, str]:
    apex = rng.randint(20, 140)
    half = math.radians(apex / 2)
    pts = _fit([(-math.sin(half), 0), (math.sin(half), 0), (0, math.cos(half))], rng)
    centre = _polygon(canvas, pts)
    for a, b in ((pts[0], pts[2]), (pts[1], pts[2])):  # tick marks for the equal sides
        mid = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
        canvas.draw.ellipse([mid[0] - 3, mid[1] - 3, mid[0] + 3, mid[1] + 3], fill=(0, 0, 0))
    canvas.label(
        f"{apex}°", (pts[2][0] + (centre[0] - pts[2][0]) * 0.35, pts[2][1] + (centre[1] - pts[2][1]) * 0.35)
    )
    canvas.label("x", (pts[0][0] + (centre[0] - pts[0][0]) * 0.3, pts[0][1] + (centre[1] - pts[0][1]) * 0.3))
    base_angle = Fraction(180 - apex, 2)
    answer = latex_degrees(base_angle)
    return (
        "<image>The two marked sides are equal. Find x in degrees.",
        answer,
        f"The base angles are equal, so $x = \\frac{{180 - {apex}}}{{2}} = {answer}$. \\boxed{{{answer}}}",
    )


KINDS: dict[str, Callable[[random.Random, _Canvas], tuple[str, str, str]]] = {
    "pythagoras": _pythagoras,
    "triangle_angles": _triangle_angles,
    "parallel_lines": _parallel,
    "circle": _circle,
    "triangle_area": _triangle_area,
    "isosceles": _isosceles,
}


def synth_geometry(
    out_dir: str | Path,
    n: int,
    seed: int = 0,
    split: str = "train",
    preset: str = "maye",
    size: int = 84,
    exclude: Sequence[str] = (),
    exclude_rate: float = 1.0,
    require: Sequence[str] = (),
) -> Path:
    """Write ``n`` synthetic geometry problems for ``split`` in MAYE's layout; return the jsonl path.

    ``preset="maye"``: the problem kinds above on 336 px diagrams. ``preset="demo"``: the polygon problems
    of :mod:`.synth_polygons` on ``size`` px images (what ``r1vision demo --task geometry`` trains on), with
    its ``exclude``/``exclude_rate``/``require`` pairs; any split name is kept as written (``test_ood``).
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if preset not in ("maye", "demo"):
        raise ValueError(f"preset must be 'maye' or 'demo', got {preset!r}")
    # MAYE's file names: the training split is "rl"; other splits by their canonical name.
    maye_split = {"train": "rl"}.get(canonical_split(split), canonical_split(split))
    rng = random.Random(f"geometry-{seed}-{maye_split}")
    out = Path(out_dir)
    if preset == "demo":
        from r1vision.tasks.geometry.synth_polygons import write_polygon_problems

        name = f"geometry_synth_{split if split not in ('train',) else maye_split}_v0"
        return write_polygon_problems(out, name, n, rng, size, exclude, exclude_rate, require)
    image_dir = out / "geometry_synth_images"
    image_dir.mkdir(parents=True, exist_ok=True)
    path = out / f"geometry_synth_{maye_split}_v0.jsonl"
    kinds = sorted(KINDS)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
            canvas = _Canvas(rng)
            question, answer, solution = KINDS[kind](rng, canvas)
            rel = f"geometry_synth_images/geometry_synth_{maye_split}_{i:05d}.png"
            canvas.image.save(out / rel, optimize=False)
            row = {
                "question": question,
                "answer": answer,
                "solution": solution,
                "id": f"geometry_synth_{maye_split}_{i}",
                "image": rel,
                "kind": kind,
            }
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
