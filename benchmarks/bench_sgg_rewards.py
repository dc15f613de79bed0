"""Throughput of the SGG rewards (completions/s on 20-object graphs) against a naive baseline.

The baseline is what a straightforward implementation does: per-pair Python IoU/GIoU/L1 loops to build
the cost matrix, and every reward function re-parsing and re-matching the completion on its own. Both are
measured in the same run on the same completions.

    PYTHONPATH=src python benchmarks/bench_sgg_rewards.py [--n 200]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision.tasks.sgg.boxes import box_frame, giou, iou, l1
from r1vision.tasks.sgg.labels import LabelSimilarity
from r1vision.tasks.sgg.parse import parse_scene_graph
from r1vision.tasks.sgg.rewards import make_rewards

NAMES = ["man", "horse", "hat", "tree", "car", "dog", "shirt", "table", "cup", "window"]
PREDS = ["on", "near", "riding", "wearing", "has", "under"]


def make_case(rng: random.Random, n_obj: int = 20, n_rel: int = 30) -> tuple[str, str, str]:
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
    pred_objs = [
        {"id": o["id"], "bbox": [round(v * 1000 / 800 + rng.uniform(-20, 20)) for v in o["bbox"]]}
        for o in objs
    ]
    rng.shuffle(pred_objs)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(0)
    cases = [make_case(rng) for _ in range(args.n)]
    texts, objs, rels = (list(x) for x in zip(*cases, strict=True))
    cols = {"objects": objs, "relationships": rels, "original_image_sizes": [[[800, 800]]] * args.n}

    t0 = time.perf_counter()
    for t, o, r in cases:
        naive_scores(t, o, r, (800, 800))
    naive = time.perf_counter() - t0

    specs = make_rewards("qwen2_vl")
    t0 = time.perf_counter()
    for spec in specs:
        values = spec.func([None] * args.n, texts, **cols)
        assert all(0.0 <= v <= 1.0 for v in values)
    ours = time.perf_counter() - t0

    print(f"{'implementation':<34}{'seconds':>10}{'completions/s':>16}{'ratio':>8}")
    print(f"{'naive (loops, per-reward parse)':<34}{naive:>10.3f}{args.n / naive:>16.1f}{1.0:>8.2f}")
    print(f"{'r1vision (5 rewards, shared)':<34}{ours:>10.3f}{args.n / ours:>16.1f}{naive / ours:>8.2f}")
    print(f"({args.n} completions, 20 objects and 30 relations each; naive computes 4 rewards, ours 5)")


if __name__ == "__main__":
    main()
