"""Throughput of the SVG rewards (completions/s: render + all reward terms) on diagram-like figures.

Compares the sandboxed pool (1 and 2 workers, warm; start-up reported separately) with an unsandboxed
baseline that renders with CairoSVG inside this process, measured in the same run on the same completions.
Completions are the synthetic figures with small perturbations (shifts, recolouring, a dropped element).

    PYTHONPATH=src python benchmarks/bench_svg_reward.py [--n 64] [--size 256]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from r1vision.tasks.svg.synth import figure_svg
from r1vision.tasks.svg.render import RenderPool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer, canvas_size, compare


def make_cases(n: int, seed: int = 0) -> list[tuple[str, str, int, int]]:
    """(ground-truth svg, completion, width, height) with the completion a perturbed copy."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        svg, w, h = figure_svg(rng)
        kind = rng.choice(("same", "shift", "recolour", "drop"))
        if kind == "shift":
            pred = svg.replace(
                "<defs>", f'<g transform="translate({rng.randint(2, 12)},{rng.randint(2, 8)})"><defs>'
            )
            pred = pred.replace("</svg>", "</g></svg>")
        elif kind == "recolour":
            pred = svg.replace("#333333", "#AA3333")
        elif kind == "drop":
            lines = svg.split("\n")
            pred = "\n".join(lines[:-3] + lines[-1:])
        else:
            pred = svg
        cases.append((svg, f"```svg\n{pred}\n```", w, h))
    return cases


def baseline(cases, gts, size: int) -> float:
    """In-process CairoSVG render + the same comparison; completions/s."""
    from cairosvg.parser import Tree
    from cairosvg.surface import PNGSurface

    from r1vision.tasks.svg.extract import extract_svg

    start = time.perf_counter()
    for (_, completion, _, _), gt in zip(cases, gts, strict=True):
        svg = extract_svg(completion)
        h, w = gt.shape[:2]
        surface = PNGSurface(
            Tree(bytestring=svg.encode()), None, 96, output_width=w, output_height=h, background_color="white"
        )
        data = np.frombuffer(surface.cairo.get_data(), np.uint8).reshape(h, surface.cairo.get_stride())
        rgb = data[:, : w * 4].reshape(h, w, 4)[..., 2::-1]
        compare(gt, np.ascontiguousarray(rgb))
    return len(cases) / (time.perf_counter() - start)


def sandboxed(cases, gts, size: int, workers: int) -> tuple[float, float]:
    """(completions/s with a warm pool of ``workers``, pool start-up seconds)."""
    start = time.perf_counter()
    pool = RenderPool(workers=workers).start()
    pool.render('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>', 4, 4)  # wait until warm
    if workers > 1:
        pool.render_many(['<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'] * workers, 4, 4)
    startup = time.perf_counter() - start
    try:
        scorer = SVGScorer(RewardConfig(size=size), pool)
        start = time.perf_counter()
        scorer.score_batch([c[1] for c in cases], gts, [c[0] for c in cases])
        rate = len(cases) / (time.perf_counter() - start)
    finally:
        pool.close()
    return rate, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    cases = make_cases(args.n)
    gt_pool = RenderPool(workers=1)
    sizes = [canvas_size(w, h, args.size) for _, _, w, h in cases]
    gts = [
        r.image
        for r in gt_pool.render_many([c[0] for c in cases], [s[0] for s in sizes], [s[1] for s in sizes])
    ]
    gt_pool.close()
    base = baseline(cases, gts, args.size)
    rows = [("in-process CairoSVG (unsandboxed)", base, 0.0)]
    for workers in (1, 2):
        rate, startup = sandboxed(cases, gts, args.size, workers)
        rows.append((f"sandbox pool, {workers} worker(s)", rate, startup))
    print(f"{args.n} diagram completions, comparison canvas {args.size}px (render + valid/pixel/ssim/edge)")
    print(f"{'mode':<36} {'completions/s':>14} {'vs baseline':>12} {'start-up s':>11}")
    for name, rate, startup in rows:
        print(f"{name:<36} {rate:>14.1f} {rate / base:>11.2f}x {startup:>11.2f}")
    if args.json:
        print(json.dumps([{"mode": n, "completions_per_s": r, "startup_s": s} for n, r, s in rows]))


if __name__ == "__main__":
    main()
