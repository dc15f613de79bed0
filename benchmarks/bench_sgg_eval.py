"""SGG evaluation at VG150-val size: 5,000 images, ~55 predicted relations each, box AP included.

Every row runs in a fresh process on the same synthetic set (GT as JSON lines, predictions as R1-SGG's
gathered ``sgg_pred_results.json``), default and ``r1sgg`` modes:

- the whole command, ``r1vision eval sgg --gt gt.jsonl --pred sgg_pred_results.json``: wall time
  including start-up, process CPU time (user + sys) and peak RSS;
- the eval core alone, ``evaluate_sgg`` on rows and records already in memory (wall and CPU; ``--skip-core``
  leaves it out: it holds every record decoded, which is what the command avoids);
- ``import r1vision`` alone.

With ``--compare-src DIR`` (e.g. ``git archive <commit> src | tar -x -C /tmp/old``, then
``--compare-src /tmp/old/src``) every row also runs on that source tree, alternating with this one round by
round; ``identical`` says whether both give exactly equal metrics (``==`` on every value). Times are the
best of ``--rounds`` (wall also as the median: the machine may be shared).

    .venv/bin/python benchmarks/bench_sgg_eval.py [--images 5000] [--rounds 3] [--compare-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OBJECTS = ["man", "horse", "hat", "tree", "car", "dog", "shirt", "table", "cup", "window", "person", "sign"]
PREDICATES = ["on", "near", "riding", "wearing", "has", "under", "in", "holding", "behind", "above"]
SRC = Path(__file__).resolve().parents[1] / "src"


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


# Runs a command in a child and prints its wall seconds, CPU seconds (user + sys) and peak RSS (KiB).
_WRAPPER = """
import resource, subprocess, sys, time
t = time.perf_counter(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
wall = time.perf_counter() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, wall, r.ru_utime + r.ru_stime, r.ru_maxrss)
"""

# The eval core in a child: rows and records decoded first (not timed), then evaluate_sgg.
_CORE = f"""
import json, sys, time, warnings
from r1vision.tasks.sgg.evaluate import evaluate_sgg
gt, pred, compat, out = sys.argv[1:5]
rows = [json.loads(line) for line in open(gt)]
preds = json.load(open(pred))
wall, cpu = time.perf_counter(), time.process_time()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m = evaluate_sgg(rows, preds, None if compat == "default" else compat, vocab="vg150", split="train",
                     predicates={PREDICATES!r})
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
json.dump({{"wall": wall, "cpu": cpu, "metrics": m}}, open(out, "w"))
"""


def _child(cmd: list[str], src: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (GiB) of ``cmd`` in a fresh process with ``src`` first."""
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    rc, wall, cpu, rss_kb = out.stdout.split()
    if rc != "0":
        raise RuntimeError(f"{cmd} exited {rc}")
    return float(wall), float(cpu), int(rss_kb) / 2**20


def _round(src: Path, tmp: Path, tag: str, core: bool = True) -> dict[str, dict]:
    """One round of every row on ``src``: {row: {wall, cpu, rss, metrics}}."""
    gt, pred = tmp / "gt.jsonl", tmp / "sgg_pred_results.json"
    out: dict[str, dict] = {}
    wall, cpu, rss = _child([sys.executable, "-c", "import r1vision"], src)
    out["import r1vision"] = {"wall": wall, "cpu": cpu, "rss": rss, "metrics": None}
    for compat in ("default", "r1sgg"):
        metrics_file = tmp / f"{tag}-{compat}.json"
        cmd = [sys.executable, "-m", "r1vision.cli", "eval", "--task", "sgg", "--dataset", str(gt), "--pred", str(pred),
               "--split", "train", "--json_out", str(metrics_file)]  # fmt: skip
        if compat != "default":
            cmd += ["--compat", compat]
        wall, cpu, rss = _child(cmd, src)
        metrics = json.loads(metrics_file.read_text())
        out[f"`r1vision eval sgg`, {compat}, start-up included"] = {"wall": wall, "cpu": cpu, "rss": rss,
                                                                    "metrics": metrics}  # fmt: skip
        if not core:
            continue
        _child([sys.executable, "-c", _CORE, str(gt), str(pred), compat, str(metrics_file)], src)
        timed = json.loads(metrics_file.read_text())
        out[f"eval core, {compat}"] = {"wall": timed["wall"], "cpu": timed["cpu"], "rss": None,
                                       "metrics": timed["metrics"]}  # fmt: skip
    return out


def _best(runs: list[dict[str, dict]]) -> dict[str, dict]:
    best = {}
    for row in runs[0]:
        best[row] = {
            "wall": min(r[row]["wall"] for r in runs),
            "median_wall": statistics.median(r[row]["wall"] for r in runs),
            "cpu": min(r[row]["cpu"] for r in runs),
            "rss": max((r[row]["rss"] for r in runs if r[row]["rss"] is not None), default=None),
            "metrics": runs[0][row]["metrics"],
            "stable": all(r[row]["metrics"] == runs[0][row]["metrics"] for r in runs),
        }
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare-src", default=None, help="baseline source tree (a src folder)")
    p.add_argument("--json", default=None)
    p.add_argument("--skip-core", action="store_true",
                   help="only the command rows (the core rows hold every record in memory: skip at 100k)")  # fmt: skip
    a = p.parse_args()
    rows, preds = make_set(a.images)
    n_rel = sum(len(v["relation_tuples"]) for v in preds.values()) / max(len(preds), 1)
    trees = {"this": SRC} | ({"baseline": Path(a.compare_src).resolve()} if a.compare_src else {})
    runs: dict[str, list] = {name: [] for name in trees}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "gt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp / "sgg_pred_results.json").write_text(json.dumps(preds))
        del rows, preds
        for _ in range(a.rounds):
            for name, src in reversed(trees.items()):  # alternating: baseline, this, baseline, this, ...
                runs[name].append(_round(src, tmp, name, core=not a.skip_core))
    load_end = os.getloadavg()
    best = {name: _best(r) for name, r in runs.items()}
    print(f"{a.images} images, {n_rel:.0f} predicted relations per image on average; best of {a.rounds} "
          f"rounds; load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end, "
          f"{os.cpu_count()} cores")  # fmt: skip
    this = best["this"]
    if a.compare_src:
        base = best["baseline"]
        print(f"baseline: {a.compare_src}")
        print("| row | baseline wall s | wall s | ratio | median wall s (baseline, this) | baseline CPU s | CPU s | "
              "ratio | baseline RSS GiB | RSS GiB | identical metrics |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for row, r in this.items():
            b = base[row]
            rss = f"{b['rss']:.2f} | {r['rss']:.2f}" if r["rss"] is not None else "| "
            same = "" if r["metrics"] is None else str(r["metrics"] == b["metrics"] and r["stable"])
            print(f"| {row} | {b['wall']:.2f} | {r['wall']:.2f} | {b['wall'] / r['wall']:.2f}x | "
                  f"{b['median_wall']:.2f}, {r['median_wall']:.2f} | {b['cpu']:.2f} | {r['cpu']:.2f} | "
                  f"{b['cpu'] / r['cpu']:.2f}x | {rss} | {same} |")  # fmt: skip
    else:
        print("| row | wall s | median wall s | CPU s | peak RSS GiB |")
        print("|---|---|---|---|---|")
        for row, r in this.items():
            rss = f"{r['rss']:.2f}" if r["rss"] is not None else ""
            print(f"| {row} | {r['wall']:.2f} | {r['median_wall']:.2f} | {r['cpu']:.2f} | {rss} |")
    for compat in ("default", "r1sgg"):
        m = this[f"`r1vision eval sgg`, {compat}, start-up included"]["metrics"]
        print(f"{compat} (the command; its r1sgg mR spans all 50 VG150 predicates): R@50 {m['R@50']:.4f}  mR@50 {m['mR@50']:.4f}  ngR@50 {m['ngR@50']:.4f}  "
              f"AP {m['AP']:.4f}  AP50 {m['AP50']:.4f}")  # fmt: skip
    print("goals: `r1vision eval sgg` <= 5 s wall including start-up, <= 0.5 GiB peak RSS")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"best": best, "load": [load_start, load_end]}, f, indent=2)


if __name__ == "__main__":
    main()
