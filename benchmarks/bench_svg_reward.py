"""SVG reward: throughput against an in-process render + RGB-SSIM baseline, pool scaling, reward vs damage,
and the cost of hostile 1 MB completions. Everything is measured in this run, on the same completions.

Workload: GRPO-shaped batches of synthetic diagrams (600-1400 px, ``benchmarks/svg_degrade.py``), ``--group``
completions per figure (identical, labels wrong, jittered, boxes dropped, ... copies).

- baseline: CairoSVG in this process + scikit-image ``structural_similarity`` on the RGB images
  (``channel_axis=2``), per completion, at the same canvas. The unsandboxed, single-metric reference.
- r1vision: ``SVGScorer.score_batch`` over a pool of N sandboxed workers; every completion is rendered *and
  scored* (valid/pixel/ssim/edge) in a worker. Rates are completions per second of wall time and per CPU
  second (trainer process + workers, from /proc), so "per core" does not depend on the machine's load.

    PYTHONPATH=src python benchmarks/bench_svg_reward.py [--figures 8] [--group 8] [--size 512] [--repeats 3]

With ``--repeats K`` the baseline and every pool run K times, alternated; ratios are against the baseline's
median.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from svg_degrade import KINDS, degrade, figure  # noqa: E402

from r1vision.tasks.svg.render import RenderPool  # noqa: E402
from r1vision.tasks.svg.rewards import DEFAULT_WEIGHTS, RewardConfig, SVGScorer, canvas_size  # noqa: E402
from r1vision.tasks.svg.score import compare  # noqa: E402

GROUP_KINDS = ("identical", "labels wrong", "jitter +-8", "75% boxes dropped")


def make_batch(figures: int, group: int, seed: int = 0) -> tuple[list[tuple[str, int, int]], list[list[str]]]:
    """``figures`` ground truths (a quarter on a coloured canvas) and ``group`` completions for each."""
    rng = random.Random(seed)
    gts = [figure(rng, background="#F3F0E6" if k % 4 == 3 else None) for k in range(figures)]
    groups = [
        [f"```svg\n{degrade(svg, GROUP_KINDS[j % len(GROUP_KINDS)], random.Random(seed + 97 * k + j))}\n```"
         for j in range(group)]
        for k, (svg, _, _) in enumerate(gts)
    ]  # fmt: skip
    return gts, groups


def _cpu_of(pids: list[int]) -> float:
    """User + system CPU seconds of processes (Linux /proc), 0 for ones that are gone."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def _render_in_process(completion: str, gt: np.ndarray) -> np.ndarray:
    """CairoSVG in this process (no sandbox), at the ground truth's size: the RGB image on white."""
    from cairosvg.parser import Tree
    from cairosvg.surface import PNGSurface

    from r1vision.tasks.svg.extract import extract_svg

    h, w = gt.shape[:2]
    tree = Tree(bytestring=extract_svg(completion).encode())
    surface = PNGSurface(tree, None, 96, output_width=w, output_height=h, background_color="white")
    data = np.frombuffer(surface.cairo.get_data(), np.uint8).reshape(h, surface.cairo.get_stride())
    return np.ascontiguousarray(data[:, : w * 4].reshape(h, w, 4)[..., 2::-1])


def baseline(gt_images: list[np.ndarray], groups: list[list[str]]) -> tuple[float, float]:
    """(completions/s wall, completions per CPU second): in-process CairoSVG + RGB SSIM."""
    from skimage.metrics import structural_similarity

    n = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for gt, completions in zip(gt_images, groups, strict=True):
        for completion in completions:
            structural_similarity(gt, _render_in_process(completion, gt), channel_axis=2, data_range=255)
            n += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, n / cpu


def sandboxed(gt_images, groups, size: int, workers: int) -> tuple[float, float, float, float]:
    """(completions/s wall, completions per CPU s (trainer + workers), trainer CPU ms per completion,
    pool start-up s) with a warm pool of ``workers``."""
    start = time.perf_counter()
    pool = RenderPool(workers=workers).start()
    pool.render_many(['<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'] * workers, 4, 4)
    startup = time.perf_counter() - start
    # Warm the workers as a training run's long-lived pool is (fonts loaded, allocator grown; the baseline's
    # process is warm too): figures of another seed, at the timed size, not scored.
    warm = [svg for svg, _, _ in make_batch(2 * workers, 1, seed=1)[0]]
    pool.render_many(warm, size, size)
    try:
        scorer = SVGScorer(RewardConfig(size=size), pool)
        completions = [c for group in groups for c in group]
        images = [gt for gt, group in zip(gt_images, groups, strict=True) for _ in group]
        pids = [w.proc.pid for w in pool._workers]
        worker_cpu, own_cpu, wall = _cpu_of(pids), time.process_time(), time.perf_counter()
        scorer.score_batch(completions, images)
        wall, own_cpu = time.perf_counter() - wall, time.process_time() - own_cpu
        worker_cpu = _cpu_of(pids) - worker_cpu
    finally:
        pool.close()
    n = len(completions)
    return n / wall, n / (own_cpu + worker_cpu), 1e3 * own_cpu / n, startup


def _render_and_compare(args: tuple) -> float:
    """Render ``completions`` in this process and score each against its ground truth; returns seconds."""
    items, size, start = args
    while time.time() < start:  # every process starts at the same moment
        time.sleep(0.001)
    t0 = time.perf_counter()
    config = RewardConfig(size=size)
    for gt, completion in items:
        compare(gt, _render_in_process(completion, gt), config)
    return time.perf_counter() - t0


def machine_scaling(gt_images, groups, size: int, k: int) -> float:
    """How much ``k`` plain processes speed up the workers' kind of work on this machine (no pool, no pipes).

    Each of ``k`` forked processes renders and scores ``1/k`` of the completions in-process; the result is
    (one process's wall time for all of them) / (the slowest of the ``k``). It is the ceiling a pool of
    ``k`` can reach here: below ``k`` when the cores share caches, memory bandwidth or a host.
    """
    import multiprocessing as mp

    items = [(gt, c) for gt, group in zip(gt_images, groups, strict=True) for c in group]
    ctx = mp.get_context("fork")
    with ctx.Pool(k) as pool:
        pool.map(_render_and_compare, [(items[:1], size, 0.0)] * k)  # imports done in every process
        one = pool.apply(_render_and_compare, ((items, size, 0.0),))
        start = time.time() + 0.2
        parts = pool.map(_render_and_compare, [(items[j::k], size, start) for j in range(k)], chunksize=1)
    return one / max(parts)


def damage_table(sizes: list[int], figures: int) -> list[dict]:
    """Mean svg_visual (default weights) and terms per degradation and canvas size."""
    rng = random.Random(1)
    figs = [figure(rng, background="#F3F0E6" if k % 4 == 3 else None) for k in range(figures)]
    total_w = sum(DEFAULT_WEIGHTS.values())
    rows = []
    with RenderPool(workers=1) as pool:
        for size in sizes:
            for kind in KINDS:
                values = []
                for k, (svg, w, h) in enumerate(figs):
                    cw, ch = canvas_size(w, h, size)
                    gt, pred = pool.render_many([svg, degrade(svg, kind, random.Random(k))], cw, ch)
                    t = compare(gt.image, pred.image, RewardConfig(size=size)) | {"valid": 1.0, "length": 0.0}
                    t["visual"] = sum(wt * t[term] for term, wt in DEFAULT_WEIGHTS.items()) / total_w
                    values.append(t)
                row = {"size": size, "kind": kind}
                row |= {
                    key: float(np.mean([v[key] for v in values]))
                    for key in ("visual", "pixel", "ssim", "edge")
                }
                row["ssim_standard"] = float(np.mean([v["ssim_standard"] for v in values]))
                rows.append(row)
    return rows


def hostile_cost(repeats: int = 1) -> tuple[float, float, int]:
    """(trainer CPU ms, wall ms) per reward call on 1 MB hostile completions, and how many there are."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for the tests' inputs
    from tests.tasks.svg.test_extract import HOSTILE

    from r1vision.tasks.svg.rewards import make_rewards

    with RenderPool(workers=1) as pool:
        (spec,) = make_rewards(combined=True, scorer=SVGScorer(RewardConfig(size=64), pool))
        gt = '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><rect width="30" height="30"/></svg>'
        spec.func(None, [gt], svg_gt=[gt])
        texts = list(HOSTILE.values())
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(repeats):
            spec.func(None, texts, svg_gt=[gt] * len(texts))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    n = repeats * len(texts)
    return 1e3 * cpu / n, 1e3 * wall / n, len(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--size", type=int, default=RewardConfig().size)
    parser.add_argument("--workers", default="1,2", help="pool sizes to time")
    parser.add_argument(
        "--table-sizes", default="256,512", help="canvas sizes of the damage table ('' = none)"
    )
    parser.add_argument("--table-figures", type=int, default=12)
    parser.add_argument("--n", type=int, default=0, help="total completions (sets --figures = n / group)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="alternate baseline and pools this many times (ratios of medians)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    if args.n:
        args.figures = max(1, args.n // args.group)
    load = os.getloadavg()[0]
    gts, groups = make_batch(args.figures, args.group)
    sizes = [canvas_size(w, h, args.size) for _, w, h in gts]
    with RenderPool(workers=1) as gt_pool:
        gt_images = [r.image for r in gt_pool.render_many([g[0] for g in gts], *zip(*sizes, strict=True))]
    n = sum(len(g) for g in groups)
    rows, bases = [], []
    for _ in range(max(1, args.repeats)):  # alternated, so that a change of load hits both sides alike
        bases.append(baseline(gt_images, groups))
        for workers in [int(w) for w in args.workers.split(",") if w]:
            rows.append((f"r1vision, pool of {workers}", *sandboxed(gt_images, groups, args.size, workers)))
    base_wall, base_cpu = (float(np.median([b[i] for b in bases])) for i in range(2))
    rows.insert(0, ("in-process CairoSVG + RGB SSIM (baseline)", base_wall, base_cpu, 1e3 / base_cpu, 0.0))
    if len(bases) > 1:
        print("baseline runs (compl/s wall, per CPU-s):", ", ".join(f"{w:.1f}/{c:.1f}" for w, c in bases))
    print(
        f"{n} completions ({args.figures} figures x {args.group}), canvas {args.size}px, {os.cpu_count()} CPUs, "
        f"load {load:.1f} at start"
    )
    print(
        f"{'mode':<42} {'compl/s':>8} {'ratio':>7} {'per CPU-s':>10} {'ratio':>7} {'trainer ms':>11} {'start-up s':>11}"
    )
    for name, wall, cpu, own_ms, startup in rows:
        print(
            f"{name:<42} {wall:>8.1f} {wall / base_wall:>6.2f}x {cpu:>10.1f} {cpu / base_cpu:>6.2f}x "
            f"{own_ms:>11.2f} {startup:>11.2f}"
        )
    ones = [r for r in rows if r[0].endswith("pool of 1")]
    one_wall = float(np.median([r[1] for r in ones])) if ones else 0.0
    one_cpu = float(np.median([r[2] for r in ones])) if ones else 0.0
    if len(ones) > 1:
        print(
            f"pool of 1, median of {len(ones)}: {one_wall / base_wall:.2f}x wall, {one_cpu / base_cpu:.2f}x per CPU-s "
            "of the baseline's median"
        )
    ceilings: dict[int, float] = {}
    for name, wall, cpu, *_ in rows:
        if ones and "pool of" in name and not name.endswith("pool of 1"):
            k = int(name.rsplit(" ", 1)[1])
            if k not in ceilings:
                ceilings[k] = machine_scaling(gt_images, groups, args.size, k)
            print(
                f"scaling {name}: wall {wall / one_wall:.2f}x of 1 worker (median of {len(ones)}; target >= "
                f"{0.85 * k:.2f} on {k} idle cores); {k} plain processes of the same work: {ceilings[k]:.2f}x "
                f"(this machine's ceiling); CPU per completion {one_cpu / cpu:.2f}x of 1 worker's"
            )
    table = damage_table([int(s) for s in args.table_sizes.split(",") if s], args.table_figures)
    if table:
        print(f"\nreward vs damage ({args.table_figures} figures, mean; svg_visual = default weights)")
        print(
            f"{'canvas':>6}  {'damage':<20} {'svg_visual':>10} {'pixel':>6} {'ssim':>6} {'edge':>6} {'std SSIM':>9}"
        )
        for r in table:
            print(
                f"{r['size']:>6}  {r['kind']:<20} {r['visual']:>10.3f} {r['pixel']:>6.3f} {r['ssim']:>6.3f} "
                f"{r['edge']:>6.3f} {r['ssim_standard']:>9.3f}"
            )
    cpu_ms, wall_ms, count = hostile_cost()
    print(
        f"\nhostile 1 MB completions ({count}): {cpu_ms:.1f} ms trainer CPU, {wall_ms:.1f} ms wall per reward"
    )
    if args.json:
        print(json.dumps({"throughput": rows, "damage": table, "hostile_ms": [cpu_ms, wall_ms]}))


if __name__ == "__main__":
    main()
