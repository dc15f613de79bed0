"""Degraded copies of synthetic diagrams for the SVG reward tables (benchmarks/bench_svg_reward.py).

Each figure is drawn at twice its synthetic size (600-1400 px, like VFig's paper figures). Degradations, from
none to most damage (:data:`KINDS`, the order a reward must keep): the whole drawing moved by 5 px of the
512 px comparison canvas, every label replaced by another word, every label removed, every element moved by
up to +-8 user units, 75 % of the boxes (with their labels) dropped, one rectangle over the content area, a
copy of the canvas colour, an empty SVG. Off the ladder: :func:`framed` (the right drawing inside a frame
along the border) and :func:`noise` (random filled rectangles), which the reward must rank far apart.
"""

from __future__ import annotations

import random
import re

from r1vision.tasks.svg.synth import WORDS, figure_svg

KINDS = (
    "identical",
    "shift 5 px",
    "labels wrong",
    "labels removed",
    "jitter +-8",
    "75% boxes dropped",
    "one box",
    "canvas colour",
    "blank",
)
# The comparison canvas a shift is measured on (RewardConfig.size).
SHIFT_CANVAS = 512
_NODE = re.compile(r"^  <(rect|circle|ellipse) [^\n]*\n  <text [^\n]*$", re.MULTILINE)


def figure(rng: random.Random, background: str | None = None) -> tuple[str, int, int]:
    """A synthetic diagram at 2x size: (svg, width, height); ``background`` recolours the canvas."""
    svg, w, h = figure_svg(rng)
    svg = svg.replace(f'width="{w}" height="{h}" viewBox', f'width="{2 * w}" height="{2 * h}" viewBox', 1)
    if background:
        svg = svg.replace(
            f'width="{w}" height="{h}" fill="#FFFFFF"', f'width="{w}" height="{h}" fill="{background}"'
        )
    return svg, 2 * w, 2 * h


def degrade(svg: str, kind: str, rng: random.Random) -> str:
    """``svg`` with the damage ``kind`` (one of :data:`KINDS`)."""
    head = svg.split("\n", 1)[0]
    vb = [float(v) for v in re.search(r'viewBox="([^"]+)"', head).group(1).split()]
    canvas = re.search(r'<rect x="0" y="0" [^>]*fill="([^"]+)"', svg).group(1)
    if kind == "identical":
        return svg
    if kind == "blank":
        return head + "</svg>"
    if kind == "canvas colour":
        return head + f'<rect x="0" y="0" width="{vb[2]}" height="{vb[3]}" fill="{canvas}"/></svg>'
    if kind == "one box":
        return (
            head + f'<rect x="0" y="0" width="{vb[2]}" height="{vb[3]}" fill="{canvas}"/>'
            f'<rect x="{vb[2] * 0.1:.1f}" y="{vb[3] * 0.2:.1f}" width="{vb[2] * 0.8:.1f}" height="{vb[3] * 0.6:.1f}" '
            'fill="#DCE6F2" stroke="#4C72B0" stroke-width="2"/></svg>'
        )
    if kind == "labels wrong":
        return re.sub(
            r">([A-Za-z]+)</text>",
            lambda m: ">" + rng.choice([w for w in WORDS if w != m.group(1)]) + "</text>",
            svg,
        )
    if kind == "labels removed":
        return re.sub(r"\n  <text [^\n]*", "", svg)
    if kind == "shift 5 px":  # the whole drawing, 5 px right and down on the comparison canvas
        unit = max(vb[2], vb[3]) / SHIFT_CANVAS * 5
        body = svg.split("\n", 1)[1].rsplit("</svg>", 1)[0]
        canvas_rect = re.search(r'  <rect x="0" y="0" [^\n]*\n', body).group(0)
        body = body.replace(canvas_rect, "", 1)
        defs_end = body.index("</defs>") + len("</defs>\n")
        return (
            head
            + "\n"
            + body[:defs_end]
            + canvas_rect
            + f'  <g transform="translate({unit:.2f},{unit:.2f})">\n'
            + body[defs_end:]
            + "  </g>\n</svg>"
        )
    if kind == "jitter +-8":
        lines = svg.split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"^  <(rect|circle|ellipse|text|line|path) ", line)
            if m and 'x="0" y="0"' not in line:
                dx, dy = rng.uniform(-8, 8), rng.uniform(-8, 8)
                lines[i] = line.replace(
                    f"<{m.group(1)} ", f'<{m.group(1)} transform="translate({dx:.1f},{dy:.1f})" ', 1
                )
        return "\n".join(lines)
    if kind == "75% boxes dropped":
        nodes = list(_NODE.finditer(svg))
        drop = set(rng.sample(range(len(nodes)), round(0.75 * len(nodes))))
        out, last = [], 0
        for k, m in enumerate(nodes):
            if k in drop:
                out.append(svg[last : m.start()])
                last = m.end()
        return "".join(out) + svg[last:]
    raise ValueError(f"unknown degradation {kind!r}")


def framed(svg: str, width: float = 0.03, colour: str = "#000000") -> str:
    """``svg`` with a frame of ``width`` (share of the longest side) stroked along its border."""
    vb = [float(v) for v in re.search(r'viewBox="([^"]+)"', svg).group(1).split()]
    sw = max(vb[2], vb[3]) * width
    frame = (
        f'<rect x="{sw / 2:.1f}" y="{sw / 2:.1f}" width="{vb[2] - sw:.1f}" height="{vb[3] - sw:.1f}" '
        f'fill="none" stroke="{colour}" stroke-width="{sw:.1f}"/>'
    )
    return svg.replace("</svg>", frame + "</svg>")


def noise(svg: str, rng: random.Random, n: int = 40) -> str:
    """``n`` randomly placed and coloured rectangles on ``svg``'s canvas and viewBox: a drawing unrelated
    to the figure."""
    head = svg.split("\n", 1)[0]
    vb = [float(v) for v in re.search(r'viewBox="([^"]+)"', head).group(1).split()]
    canvas = re.search(r'<rect x="0" y="0" [^>]*fill="([^"]+)"', svg).group(1)
    parts = [head, f'<rect x="0" y="0" width="{vb[2]}" height="{vb[3]}" fill="{canvas}"/>']
    for _ in range(n):
        x, y = rng.uniform(0, vb[2]), rng.uniform(0, vb[3])
        w, h = rng.uniform(5, vb[2] / 4), rng.uniform(5, vb[3] / 4)
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#{rng.randrange(1 << 24):06x}"/>'
        )
    return "".join(parts) + "</svg>"
