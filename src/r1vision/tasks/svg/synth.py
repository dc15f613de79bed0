"""Synthetic diagram figures for the ``svg`` task, in VFig's parquet schema.

Each figure has 2-6 nodes (rounded boxes, circles, ellipses) on a jittered grid with text labels, arrows
between them (some dashed, some curved) and sometimes a dashed group frame, i.e. the content of
paper-figure diagrams at toy scale. The SVG is the ground truth; the PNG is rendered from it through the
sandboxed renderer, so training images and reward renders come from the same pipeline.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from r1vision.tasks.svg.prompts import PROMPT
from r1vision.tasks.svg.render import RenderPool, default_pool

WORDS = (
    "Input",
    "Encoder",
    "Decoder",
    "Attention",
    "Loss",
    "Output",
    "Image",
    "Text",
    "Fusion",
    "Pool",
    "Conv",
    "MLP",
    "Norm",
    "Embed",
    "Query",
    "Key",
    "Value",
    "Memory",
    "Policy",
    "Reward",
    "Critic",
    "Data",
)
PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
FILLS = ("#DCE6F2", "#FBE5D6", "#E2F0D9", "#F8D7DA", "#E4DFEC", "#FFF2CC", "#FFFFFF")


def _node_svg(rng: random.Random, shape: str, cx: float, cy: float, w: float, h: float, label: str) -> str:
    stroke = rng.choice(PALETTE)
    fill = rng.choice(FILLS)
    sw = rng.choice((1.5, 2, 2.5))
    if shape == "circle":
        r = min(w, h) / 2
        body = f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}" fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/>'
    elif shape == "ellipse":
        body = (
            f'<ellipse cx="{cx:.1f}" cy="{cy:.1f}" rx="{w / 2:.1f}" ry="{h / 2:.1f}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{sw}"/>'
        )
    else:
        rx = rng.choice((0, 4, 8))
        body = (
            f'<rect x="{cx - w / 2:.1f}" y="{cy - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/>'
        )
    size = 14 if len(label) < 8 else 12
    text = (
        f'<text x="{cx:.1f}" y="{cy + size * 0.35:.1f}" font-family="DejaVu Sans, Arial, sans-serif" '
        f'font-size="{size}" text-anchor="middle" fill="#222222">{label}</text>'
    )
    return f"  {body}\n  {text}"


def _boundary(
    cx: float, cy: float, w: float, h: float, shape: str, tx: float, ty: float
) -> tuple[float, float]:
    """Point where the ray from the node centre towards (tx, ty) leaves the node (approximately)."""
    dx, dy = tx - cx, ty - cy
    dist = math.hypot(dx, dy) or 1.0
    if shape in ("circle", "ellipse"):
        a, b = (min(w, h) / 2,) * 2 if shape == "circle" else (w / 2, h / 2)
        t = 1.0 / math.sqrt((dx / dist / a) ** 2 + (dy / dist / b) ** 2)
    else:
        t = min((w / 2) / (abs(dx / dist) or 1e-9), (h / 2) / (abs(dy / dist) or 1e-9))
    return cx + dx / dist * (t + 2), cy + dy / dist * (t + 2)


def figure_svg(rng: random.Random) -> tuple[str, int, int]:
    """One random diagram: (svg text, width, height)."""
    cols, rows = rng.choice(((2, 1), (3, 1), (2, 2), (3, 2), (4, 1)))
    width = rng.randrange(96 * cols + 64, 160 * cols + 96, 8)
    height = rng.randrange(max(96 * rows + 64, 200), 150 * rows + 160, 8)
    cells = [(c, r) for r in range(rows) for c in range(cols)]
    count = rng.randint(2, len(cells))
    chosen = sorted(rng.sample(cells, count), key=lambda cr: (cr[1], cr[0]))
    cw, ch = width / cols, height / rows
    nodes = []
    for c, r in chosen:
        shape = rng.choice(("rect", "rect", "rect", "circle", "ellipse"))
        w = rng.uniform(0.5, 0.7) * cw
        h = rng.uniform(0.3, 0.45) * ch if rows > 1 else rng.uniform(0.25, 0.4) * height
        cx = (c + 0.5) * cw + rng.uniform(-0.1, 0.1) * cw
        cy = (r + 0.5) * ch + rng.uniform(-0.08, 0.08) * ch
        nodes.append((shape, cx, cy, w, h, rng.choice(WORDS)))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        "  <defs>",
        '    <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#333333"/></marker>',
        "  </defs>",
        f'  <rect x="0" y="0" width="{width}" height="{height}" fill="#FFFFFF"/>',
    ]
    if len(nodes) >= 3 and rng.random() < 0.4:  # a dashed frame around a group of nodes
        group = nodes[: rng.randint(2, len(nodes))]
        x0 = min(n[1] - n[3] / 2 for n in group) - 10
        y0 = min(n[2] - n[4] / 2 for n in group) - 10
        x1 = max(n[1] + n[3] / 2 for n in group) + 10
        y1 = max(n[2] + n[4] / 2 for n in group) + 10
        parts.append(
            f'  <rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" fill="none" '
            f'stroke="#999999" stroke-width="1.5" stroke-dasharray="6,4"/>'
        )
    edges = [(i, i + 1) for i in range(len(nodes) - 1)]
    if len(nodes) > 2 and rng.random() < 0.5:
        edges.append((0, len(nodes) - 1))
    for a, b in edges:
        sa, ax, ay, aw, ah, _ = nodes[a]
        sb, bx, by, bw, bh, _ = nodes[b]
        x1, y1 = _boundary(ax, ay, aw, ah, sa, bx, by)
        x2, y2 = _boundary(bx, by, bw, bh, sb, ax, ay)
        dash = ' stroke-dasharray="5,4"' if rng.random() < 0.3 else ""
        if rng.random() < 0.25:  # curved connector
            mx, my = (x1 + x2) / 2 + rng.uniform(-30, 30), (y1 + y2) / 2 - rng.uniform(20, 50)
            geom = f'<path d="M{x1:.1f},{y1:.1f} Q{mx:.1f},{my:.1f} {x2:.1f},{y2:.1f}" fill="none"'
        else:
            geom = f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
        parts.append(f'  {geom} stroke="#333333" stroke-width="2"{dash} marker-end="url(#arrow)"/>')
    parts += [_node_svg(rng, *node) for node in nodes]
    parts.append("</svg>")
    return "\n".join(parts), width, height


def synth_svg(
    out_dir: str | Path,
    n: int,
    seed: int = 0,
    split: str = "train",
    preset: str = "vfig",
    size: int = 84,
    exclude: Sequence[str] = (),
    exclude_rate: float = 1.0,
    require: Sequence[str] = (),
    **kwargs: Any,
) -> Path:
    """Write ``n`` figures to ``out_dir`` and return ``out_dir/{split}.parquet``.

    ``preset="vfig"``: the diagrams above. ``preset="demo"``: one or two shapes on a ``size`` px canvas
    (:mod:`.synth_shapes`, what ``r1vision demo --task svg`` trains on) with its ``exclude``/
    ``exclude_rate``/``require`` colour-shape pairs.

    Files: ``svgs/{split}_{i:05d}.svg`` and ``images/{split}_{i:05d}.png`` (rendered in the sandbox). Rows
    follow VFig: ``prompt`` (chat messages with an ``<image>`` placeholder), ``response`` (the SVG),
    ``images`` (PNG paths relative to the parquet file), ``reward_model`` (``{"ground_truth": png path,
    "style": "rule"}``), ``extra_info`` (``{"png_size": [w, h], "index", "split"}``) and ``data_source``.
    Deterministic for a seed. ``kwargs`` go to :class:`~r1vision.tasks.svg.render.RenderPool` if given.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if preset not in ("vfig", "demo"):
        raise ValueError(f"preset must be 'vfig' or 'demo', got {preset!r}")
    rng = random.Random(f"svg-{seed}-{split}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "svgs").mkdir(parents=True, exist_ok=True)
    if preset == "demo":
        from r1vision.tasks.svg.synth_shapes import shapes_figure

        figures = [shapes_figure(rng, size, exclude, exclude_rate, require) for _ in range(n)]
    else:
        figures = [figure_svg(rng) for _ in range(n)]
    pool = RenderPool(**kwargs) if kwargs else default_pool()
    try:
        results = pool.render_many([f[0] for f in figures], [f[1] for f in figures], [f[2] for f in figures])
    finally:
        if kwargs:
            pool.close()
    rows = []
    for i, ((svg, width, height), result) in enumerate(zip(figures, results, strict=True)):
        if not result.ok:
            raise RuntimeError(f"synthetic figure {i} failed to render: {result.reason} {result.detail}")
        png = f"images/{split}_{i:05d}.png"
        Image.fromarray(result.image).save(out / png)
        (out / f"svgs/{split}_{i:05d}.svg").write_text(svg)
        rows.append(
            {
                "data_source": "r1vision/synth_svg",
                "prompt": [{"role": "user", "content": f"<image>{PROMPT}"}],
                "response": svg,
                "images": [png],
                "reward_model": {"ground_truth": png, "style": "rule"},
                "extra_info": {"png_size": [width, height], "index": i, "split": split},
            }
        )
    path = out / f"{split}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
