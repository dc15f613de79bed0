"""SGG evaluation at VG150-val size: 5,000 images, ~55 predicted relations each, box AP included.

Rows of the table, all measured in the same run on the same synthetic set:

- eval core, in process (``evaluate_sgg``: R/mR/zR/ngR/ng-mR/ng-zR + COCO box AP), default and ``r1sgg``
  modes, against a baseline with the same pipeline but a per-pair Python loop for the candidate x GT
  matching (the straightforward implementation), with a check that both give identical metrics;
- the whole command, ``r1vision eval sgg --gt gt.jsonl --pred sgg_pred_results.json`` in a fresh process:
  wall time including start-up (``import r1vision``) and its peak RSS, next to ``import r1vision`` alone.

    .venv/bin/python benchmarks/bench_sgg_eval.py [--images 5000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
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
    """GT rows and R1-SGG-style prediction records (objects with jittered boxes, relation tuples with
    relabelled predicates and misses, at most 100 per image)."""
    rng = random.Random(seed)
    rows, preds = [], {}
    for i in range(n_images):
        n_obj = rng.randint(5, 25)
        objs = [{"id": f"{rng.choice(OBJECTS)}.{k}", "bbox": _box(rng)} for k in range(n_obj)]
        rels = []
        for _ in range(rng.randint(20, 140)):
            s, o = rng.sample(range(n_obj), 2)
            rels.append(
                {"subject": objs[s]["id"], "predicate": rng.choice(PREDICATES), "object": objs[o]["id"]}
            )
        image_id = f"img{i}"
        rows.append({"image_id": image_id, "objects": json.dumps(objs), "relationships": json.dumps(rels)})
        boxes = {o["id"]: [v + rng.uniform(-15, 15) for v in o["bbox"]] for o in objs if rng.random() < 0.9}
        boxes = {
            k: [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])] for k, b in boxes.items()
        }
        tuples = []
        for r in rels:
            if r["subject"] in boxes and r["object"] in boxes and rng.random() < 0.65:
                pred = r["predicate"] if rng.random() < 0.7 else rng.choice(PREDICATES)
                tuples.append([r["subject"], boxes[r["subject"]], r["object"], boxes[r["object"]], pred])
        rng.shuffle(tuples)
        names = list(boxes)
        preds[image_id] = {
            "image_id": image_id,
            "boxes": [boxes[n] for n in names],
            "labels": [OBJECTS.index(n.split(".")[0]) + 1 for n in names],
            "scores": [1.0] * len(names),
            "names": names,
            "relation_tuples": tuples[:100],
        }
    return rows, preds


def _loop_hit_matrix(gt, cands, compat):
    """Baseline: label codes compared and one scalar IoU call per candidate/GT pair."""
    hit = np.zeros((len(cands), gt.n), dtype=bool)
    cs, co, cp = gt.encode(cands, 0), gt.encode(cands, 2), gt.encode(cands, 4)
    for i in range(len(cands)):
        for j in range(gt.n):
            if cs[i] == gt.s[j] and co[i] == gt.o[j] and cp[i] == gt.p[j]:
                hit[i, j] = (
                    iou(cands[i][1], gt.sbox[j].tolist(), compat) >= 0.5
                    and iou(cands[i][3], gt.obox[j].tolist(), compat) >= 0.5
                )
    return hit


def _timed(rows, preds, compat):
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics = ev.evaluate_sgg(rows, preds, compat, vocab="vg150", predicates=PREDICATES)
    return time.perf_counter() - wall, time.process_time() - cpu, metrics


def _child(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (GiB) of a fresh process."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "wall = time.perf_counter() - t\n"
        "print(rc, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], env=env, capture_output=True, text=True, check=True
    )
    rc, wall, rss_kb = out.stdout.split()
    if rc != "0":
        raise RuntimeError(f"{cmd} exited {rc}")
    return float(wall), int(rss_kb) / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rows, preds = make_set(a.images)
    n_rel = np.mean([len(v["relation_tuples"]) for v in preds.values()])
    results = []
    for compat in (None, "r1sgg"):
        fast_s, fast_cpu, fast = _timed(rows, preds, compat)
        with mock.patch.object(ev, "_hit_matrix", _loop_hit_matrix):
            slow_s, slow_cpu, slow = _timed(rows, preds, compat)
        same = all(abs(fast[k] - slow[k]) < 1e-12 for k in fast)
        results.append({"row": f"eval core, {compat or 'default'}", "baseline_s": slow_s, "s": fast_s,
                        "cpu_s": fast_cpu, "ratio": slow_s / fast_s, "identical": same, "R@50": fast["R@50"],
                        "AP50": fast["AP50"]})  # fmt: skip

    env = dict(os.environ, PYTHONPATH=str(Path(ev.__file__).parents[3]), OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        gt, pred = Path(tmp) / "gt.jsonl", Path(tmp) / "sgg_pred_results.json"
        gt.write_text("".join(json.dumps(r) + "\n" for r in rows))
        pred.write_text(json.dumps(preds))
        imp_s, imp_rss = _child([sys.executable, "-c", "import r1vision"], env)
        cmd = [sys.executable, "-m", "r1vision.cli", "eval", "sgg", "--gt", str(gt), "--pred", str(pred)]
        cli_s, cli_rss = _child(cmd + ["--split", "train"], env)
        cli_c_s, cli_c_rss = _child(cmd + ["--split", "train", "--compat", "r1sgg"], env)
    load = os.getloadavg()[0]
    print(f"{a.images} images, {n_rel:.0f} predicted relations per image on average; load average {load:.1f} "
          f"on {os.cpu_count()} cores")  # fmt: skip
    print("| row | baseline s | s | CPU s | ratio (baseline / this) | identical metrics | R@50 | AP50 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['row']} (per-pair loop baseline) | {r['baseline_s']:.2f} | {r['s']:.2f} | {r['cpu_s']:.2f} | "
              f"{r['ratio']:.2f}x | {r['identical']} | {r['R@50']:.3f} | {r['AP50']:.3f} |")  # fmt: skip
    print("| row | wall s (goal <= 5) | peak RSS GiB (goal <= 0.5) |")
    print("|---|---|---|")
    print(f"| `import r1vision` alone | {imp_s:.2f} | {imp_rss:.2f} |")
    print(f"| `r1vision eval sgg` (default), start-up included | {cli_s:.2f} | {cli_rss:.2f} |")
    print(f"| `r1vision eval sgg --compat r1sgg`, start-up included | {cli_c_s:.2f} | {cli_c_rss:.2f} |")
    print(f"| eval work in the command (command - import) | {cli_s - imp_s:.2f} | |")
    if a.json:
        results.append({"import_s": imp_s, "cli_s": cli_s, "cli_rss_gib": cli_rss, "cli_compat_s": cli_c_s})
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
