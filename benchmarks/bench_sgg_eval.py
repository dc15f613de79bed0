"""SGG evaluation on a VG150-val-sized synthetic prediction set: 5,000 images, up to 100 relations each.

Compares the vectorised matcher with a per-pair Python loop baseline (the straightforward
implementation: one IoU call per candidate/GT pair), measured in the same run on the same data, and
checks that both give identical metrics.

    .venv/bin/python benchmarks/bench_sgg_eval.py [--images 5000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from unittest import mock

import numpy as np

from r1vision.tasks.sgg import evaluate as ev
from r1vision.tasks.sgg.boxes import iou

OBJECTS = ["man", "horse", "hat", "tree", "car", "dog", "shirt", "table", "cup", "window", "person", "sign"]
PREDICATES = ["on", "near", "riding", "wearing", "has", "under", "in", "holding", "behind", "above"]


def _box(rng: random.Random) -> list[float]:
    x, y = rng.uniform(0, 600), rng.uniform(0, 400)
    return [round(x), round(y), round(x + rng.uniform(20, 300)), round(y + rng.uniform(20, 300))]


def make_set(n_images: int, seed: int = 0) -> tuple[list[dict], dict[str, dict]]:
    """GT rows and R1-SGG-style prediction records (boxes/labels/relation tuples) with noise and misses."""
    rng = random.Random(seed)
    rows, preds = [], {}
    for i in range(n_images):
        n_obj = rng.randint(5, 25)
        objs = [{"id": f"{rng.choice(OBJECTS)}.{k}", "bbox": _box(rng)} for k in range(n_obj)]
        rels = []
        for _ in range(rng.randint(1, 100)):
            s, o = rng.sample(range(n_obj), 2)
            rels.append(
                {"subject": objs[s]["id"], "predicate": rng.choice(PREDICATES), "object": objs[o]["id"]}
            )
        image_id = f"img{i}"
        rows.append({"image_id": image_id, "objects": json.dumps(objs), "relationships": json.dumps(rels)})
        # predictions: jittered GT relations (some relabelled) plus random extras, up to 100
        tuples = []
        for r in rels:
            s = next(o for o in objs if o["id"] == r["subject"])
            o = next(o for o in objs if o["id"] == r["object"])
            jit = [[v + rng.uniform(-15, 15) for v in b["bbox"]] for b in (s, o)]
            pred = r["predicate"] if rng.random() < 0.7 else rng.choice(PREDICATES)
            tuples.append([s["id"], jit[0], o["id"], jit[1], pred])
        rng.shuffle(tuples)
        names = sorted({t[0] for t in tuples} | {t[2] for t in tuples})
        preds[image_id] = {
            "image_id": image_id,
            "boxes": [[0, 0, 1, 1]] * len(names),
            "labels": [1] * len(names),
            "names": names,
            "relation_tuples": tuples[:100],
        }
    return rows, preds


def _loop_hit_matrix(gt_trips, cands, compat):
    """Baseline: one scalar IoU call per candidate/GT pair."""
    hit = np.zeros((len(cands), len(gt_trips)), dtype=bool)
    for i, (cs, cbs, co, cbo, cp) in enumerate(cands):
        for j, (gs, gbs, go, gbo, gp) in enumerate(gt_trips):
            if cs == gs and co == go and cp == gp:
                hit[i, j] = iou(cbs, gbs, compat) >= 0.5 and iou(cbo, gbo, compat) >= 0.5
    return hit


def _timed(rows, preds, compat):
    start = time.perf_counter()
    metrics = ev.evaluate_sgg(rows, preds, compat, vocab="vg150", predicates=PREDICATES)
    return time.perf_counter() - start, metrics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rows, preds = make_set(a.images)
    results = []
    for compat in (None, "r1sgg"):
        fast_s, fast = _timed(rows, preds, compat)
        with mock.patch.object(ev, "_hit_matrix", _loop_hit_matrix):
            slow_s, slow = _timed(rows, preds, compat)
        same = all(abs(fast[k] - slow[k]) < 1e-12 for k in fast)
        results.append({"mode": compat or "default", "vectorised_s": fast_s, "loop_s": slow_s,
                        "speedup": slow_s / fast_s, "identical_metrics": same, "R@50": fast["R@50"]})  # fmt: skip
    print(f"{a.images} images, up to 100 relations each")
    print("| mode | per-pair loop (baseline) s | vectorised s | speed-up | identical metrics | R@50 |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['mode']} | {r['loop_s']:.1f} | {r['vectorised_s']:.1f} | {r['speedup']:.2f}x | "
              f"{r['identical_metrics']} | {r['R@50']:.3f} |")  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
