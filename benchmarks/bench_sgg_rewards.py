"""Throughput of the SGG rewards (completions/s on 20-object / 30-relation graphs) against a naive baseline.

The baseline is what a straightforward implementation does: per-pair Python IoU/GIoU/L1 loops to build
the cost matrix, and every reward function re-parsing and re-matching the completion on its own. Both are
measured in the same run on the same completions, one core (``OMP_NUM_THREADS=1``), best of 5 rounds
(``--rounds``) with a fresh reward set and no decoded ground truth carried over into a round. Rates are
given per wall second and per CPU second of this process (the latter is what one core delivers when the
machine is shared).

Workloads: "distinct" gives every completion its own ground truth (issue 16's workload); "groups of 8"
is GRPO's shape (8 completions per prompt share the ground truth, which is then converted once).

    PYTHONPATH=src python benchmarks/bench_sgg_rewards.py [--n 200] [--compare-src OLD/src]

The same cases are also timed with this checkout's pure-Python paths (``R1VISION_PURE_PYTHON=1``, in a
subprocess) when the compiled helpers are loaded. ``--compare-src`` also times another checkout's
``make_rewards`` (e.g. ``git archive 8605a90 src | tar -x -C /tmp/old``, the implementation before
vectorisation) on the same cases, in a subprocess, same run. The sides are timed alternately
(``--alternate`` times each) and each keeps its best.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision.tasks.sgg.boxes import box_frame, giou, iou, l1
from r1vision.tasks.sgg.labels import LabelSimilarity
from r1vision.tasks.sgg.parse import parse_scene_graph
from r1vision.tasks.sgg.rewards import make_rewards

NAMES = ["man", "horse", "hat", "tree", "car", "dog", "shirt", "table", "cup", "window"]
PREDS = ["on", "near", "riding", "wearing", "has", "under"]


def make_case(
    rng: random.Random, n_obj: int = 20, n_rel: int = 30, pred_rng: random.Random | None = None
) -> tuple[str, str, str]:
    """(completion, GT objects, GT relations); ``pred_rng`` draws the answer's noise (default: ``rng``)."""
    objs = []
    for k in range(n_obj):
        x, y = rng.uniform(0, 500), rng.uniform(0, 500)
        objs.append(
            {
                "id": f"{rng.choice(NAMES)}.{k}",
                "bbox": [x, y, x + rng.uniform(10, 300), y + rng.uniform(10, 300)],
            }
        )
    rels = [
        {"subject": rng.choice(objs)["id"], "predicate": rng.choice(PREDS), "object": rng.choice(objs)["id"]}
        for _ in range(n_rel)
    ]
    noise = pred_rng or rng
    pred_objs = [
        {"id": o["id"], "bbox": [round(v * 1000 / 800 + noise.uniform(-20, 20)) for v in o["bbox"]]}
        for o in objs
    ]
    noise.shuffle(pred_objs)
    for o in pred_objs:
        o["bbox"] = [
            min(o["bbox"][0], o["bbox"][2]),
            min(o["bbox"][1], o["bbox"][3]),
            max(o["bbox"][0], o["bbox"][2]),
            max(o["bbox"][1], o["bbox"][3]),
        ]
    text = "<answer>" + json.dumps({"objects": pred_objs, "relationships": rels}) + "</answer>"
    return text, json.dumps(objs), json.dumps(rels)


def naive_scores(text: str, objects: str, relationships: str, size: tuple[int, int]) -> list[float]:
    """Per-call parse + Python-loop cost matrix + matching, once per reward (no sharing)."""
    out = []
    sim = LabelSimilarity()
    for _reward in ("node", "box", "edge", "edge_hard"):
        parsed = parse_scene_graph(text)
        gt = json.loads(objects)
        frame = box_frame("qwen2_vl", size)
        gtb = [frame.normalize(frame.to_model(o["bbox"])) for o in gt]
        pb = [frame.normalize(o.box) for o in parsed.graph.objects]
        cost = np.zeros((len(pb), len(gtb)))
        for i, p in enumerate(pb):
            for j, g in enumerate(gtb):
                s = sim(parsed.graph.objects[i].name, gt[j]["id"])
                cost[i, j] = (1 - s) + (1 - giou(p, g)) + l1(p, g)
        rows, cols = linear_sum_assignment(cost)
        out.append(
            sum(
                0.5 * (iou(pb[r], gtb[c]) + math.exp(-l1(pb[r], gtb[c])))
                for r, c in zip(rows, cols, strict=True)
            )
            / len(gtb)
        )
    return out


def _fresh() -> None:
    """Forget decoded ground truth (a module-level cache), as a training step with new prompts does."""
    from r1vision.tasks.sgg import matching

    cache = getattr(matching, "_gt_from_json", None)
    if cache is not None:
        cache.cache_clear()


def _best(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return max(a[0], b[0]), max(a[1], b[1])


def _rate(run, n: int, rounds: int = 3) -> tuple[float, float]:
    """Best (wall, CPU) completions/s over ``rounds``, each starting without decoded ground truth."""
    wall = cpu = float("inf")
    for _ in range(rounds):
        _fresh()
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return n / wall, n / cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--compare-src", default=None, help="another checkout's src/ to time on the same cases")
    ap.add_argument("--rounds", type=int, default=5, help="best of this many rounds (CPU time is noisy)")
    ap.add_argument("--alternate", type=int, default=3, help="times each side is run, alternating")
    args = ap.parse_args()
    distinct = cases_for(args.n, "distinct")
    grouped = cases_for(args.n, "groups of 8")  # a prompt's 8 completions: the same GT, 8 different answers
    assert len({t for t, _, _ in grouped}) == len(grouped)

    def ours(cases):
        texts, objs, rels = (list(x) for x in zip(*cases, strict=True))
        cols = {"objects": objs, "relationships": rels, "original_image_sizes": [[[800, 800]]] * len(cases)}

        def run():
            for spec in make_rewards("qwen2_vl"):
                values = spec.func([None] * len(cases), texts, **cols)
                assert all(0.0 <= v <= 1.0 for v in values)

        return run

    def naive(cases):
        return lambda: [naive_scores(t, o, r, (800, 800)) for t, o, r in cases]

    from r1vision import compiled  # here, not at the top: older checkouts import this module too

    rows, other, pure = [], {}, {}
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    for label, cases in (("distinct", distinct), ("groups of 8", grouped)):
        base = _rate(naive(cases), len(cases), rounds=1)
        fast = (0.0, 0.0)
        for _ in range(args.alternate):  # alternate: load changes hit every side
            fast = _best(fast, _rate(ours(cases), len(cases), args.rounds))
            if compiled.AVAILABLE:  # this checkout without its compiled helpers
                that = _other_checkout(here, args.n, label, args.rounds, pure=True)
                pure[label] = _best(pure.get(label, (0.0, 0.0)), that)
            if args.compare_src:
                that = _other_checkout(args.compare_src, args.n, label, args.rounds)
                other[label] = _best(other.get(label, (0.0, 0.0)), that)
        rows.append((label, base, fast))
    load = os.getloadavg()[0]
    print(
        f"{args.n} completions, 20 objects / 30 relations each; load average {load:.1f} on {os.cpu_count()} cores"
    )
    print("| workload | naive (4 rewards) /s wall | r1vision (5 rewards) /s wall | ratio | naive /s CPU | "
          "r1vision /s CPU | ratio | goal |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for label, base, fast in rows:
        print(f"| {label} | {base[0]:.0f} | {fast[0]:.0f} | {fast[0] / base[0]:.1f}x | {base[1]:.0f} | "
              f"{fast[1]:.0f} | {fast[1] / base[1]:.1f}x | >= 6000 /s per core |")  # fmt: skip
    print(f"\ncompiled helpers (r1vision._speedups): {'loaded' if compiled.AVAILABLE else 'NOT loaded'}")
    for title, table in (
        ("this checkout with R1VISION_PURE_PYTHON=1 (its pure-Python paths)", pure),
        (f"{args.compare_src}", other),
    ):
        if not table:
            continue
        print(f"\nthe same cases with {title} (a subprocess, same run):")
        print(
            "| workload | that checkout /s wall | this /s wall | ratio | that /s CPU | this /s CPU | ratio |"
        )
        print("|---|---|---|---|---|---|---|")
        for label, _, fast in rows:
            w, c = table[label]
            print(f"| {label} | {w:.0f} | {fast[0]:.0f} | {fast[0] / w:.1f}x | {c:.0f} | {fast[1]:.0f} | "
                  f"{fast[1] / c:.1f}x |")  # fmt: skip


_OTHER = """
import random, sys, time
sys.path.insert(0, {bench!r})
from bench_sgg_rewards import cases_for, _rate
from r1vision.tasks.sgg.rewards import make_rewards
cases = cases_for({n}, {label!r})
texts, objs, rels = (list(x) for x in zip(*cases))
cols = {{"objects": objs, "relationships": rels, "original_image_sizes": [[[800, 800]]] * len(cases)}}
def run():
    for spec in make_rewards("qwen2_vl"):
        spec.func([None] * len(cases), texts, **cols)
print(*_rate(run, len(cases), {rounds}))
"""


def _other_checkout(src: str, n: int, label: str, rounds: int, pure: bool = False) -> tuple[float, float]:
    code = _OTHER.format(bench=os.path.dirname(os.path.abspath(__file__)), n=n, label=label, rounds=rounds)
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1", R1VISION_PURE_PYTHON="1" if pure else "0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


def cases_for(n: int, label: str) -> list[tuple[str, str, str]]:
    """The benchmark's cases: ``label`` "distinct" or "groups of 8" (see the module docstring)."""
    if label == "distinct":
        rng = random.Random(0)
        return [make_case(rng) for _ in range(n)]
    return [
        make_case(random.Random(g), pred_rng=random.Random(1000 * g + k))
        for g in range((n + 7) // 8)
        for k in range(8)
    ][:n]


if __name__ == "__main__":
    main()
