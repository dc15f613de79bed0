"""The SGG rewards against R1-SGG's own reward code, same completions, same run (issue 34.3).

R1-SGG's side runs its rewards from a checkout of gpt4vision/R1-SGG (``open_r1/grpo.py``: ``format_reward``,
``node_acc_reward``, ``node_box_reward``, ``edge_reward``, the set its training uses when none is named), in a
subprocess of an interpreter that has spaCy (``--r1sgg-python``). Nothing of that file is copied here: it is
loaded from the checkout, with the training-only imports (torch, transformers, TRL, datasets and its trainer
package) replaced by empty modules, which the reward functions never touch.

Its label similarity is ``spacy.load("en_core_web_sm")`` ``Doc.similarity``. That model is downloaded from
GitHub, not from the package registries, so where it is not installed the benchmark builds a *stand-in*:
a blank English pipeline with spaCy's default ``tok2vec`` (width 96, like en_core_web_sm's, seeded random
weights). The reward caches ``nlp(word)`` (``lru_cache``), so once the labels are warm its spaCy cost is
``Doc.similarity`` on the cached 96-wide tensors, the same path (and warning W007) as with en_core_web_sm;
the similarities' values differ, so the matchings do, but not the work of building and solving them. With the
real model installed it is used. Between rounds R1-SGG's matching cache (``_bi_match_cached``) is cleared, as
new completions miss it in training; the label cache stays warm.

r1vision's side is ``make_rewards("qwen2_vl", preset="r1sgg")``: the same four rewards plus ``edge_hard``.
Both sides see the completions in their own coordinate convention (Qwen2-VL's 0-1000 frame; R1-SGG scales
them by ``box_scale`` 1000 against ground truth normalised to [0, 1]). One core, best of ``--rounds``,
sides alternated ``--alternate`` times; rates per CPU second of each process.

    PYTHONPATH=src python benchmarks/bench_sgg_vs_r1sgg.py --r1sgg /path/to/R1-SGG \\
        --r1sgg-python /path/to/venv-with-spacy/bin/python [--n 200] [--sizes 20x30,100x150]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sgg_rewards import make_case  # noqa: E402

from r1vision.tasks.sgg.rewards import make_rewards  # noqa: E402

CANVAS = 800  # the cases' ground truth is in pixels of an 800 x 800 image

# Run by --r1sgg-python: load R1-SGG's grpo.py with the training-only imports stubbed, time its rewards.
_R1SGG = r"""
import importlib.abc, importlib.machinery, importlib.util, json, random, sys, time, types, warnings

STUBBED = {"torch", "transformers", "trl", "datasets", "trainer", "open_r1", "deepspeed", "wandb", "peft"}

class _Anything:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return _Anything()
    def __getattr__(self, name): return _Anything()

class _Module(types.ModuleType):
    __path__ = []
    def __getattr__(self, name):
        if name.startswith("__"): raise AttributeError(name)
        return _Anything

class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec): return _Module(spec.name)
    def exec_module(self, module): pass

import spacy  # before the stubs: thinc probes for torch and must see it missing
from spacy.util import is_package
sys.meta_path.insert(0, _Stubs())
model = "en_core_web_sm (installed)"
if not is_package("en_core_web_sm"):
    from thinc.api import fix_random_seed
    fix_random_seed(0)
    standin = spacy.blank("en")
    standin.add_pipe("tok2vec")
    standin.initialize()
    spacy.load = lambda *a, **k: standin
    model = "stand-in: blank en + default tok2vec (width 96), seeded"
spec = importlib.util.spec_from_file_location("r1sgg_grpo", sys.argv[1])
grpo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grpo)
warnings.simplefilter("ignore")  # W007 on every similarity: printed once in training, not timed here
cases = json.load(open(sys.argv[2]))
rounds = int(sys.argv[3])
funcs = [grpo.format_reward, grpo.node_acc_reward, grpo.node_box_reward, grpo.edge_reward]
n = len(cases["texts"])
best_wall = best_cpu = float("inf")
for _ in range(rounds):
    grpo._bi_match_cached.cache_clear()  # new completions miss it in training
    completions = [[{"content": t}] for t in cases["texts"]]
    sols = [{"objects": o, "relationships": r} for o, r in zip(cases["objects"], cases["relationships"])]
    kw = dict(solution=sols, image_id=list(range(n)), task_type_list=["sgg"] * n, box_scale=[[1000, 1000]] * n)
    t0, c0 = time.perf_counter(), time.process_time()
    values = [f(json.loads(json.dumps(completions)), **kw) for f in funcs]  # their rewards edit the dicts
    best_wall, best_cpu = min(best_wall, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
print(json.dumps({"wall": n / best_wall, "cpu": n / best_cpu, "model": model,
                  "mean": [sum(v) / n for v in values]}))
"""


def cases(n: int, n_obj: int, n_rel: int, grouped: bool) -> list[tuple[str, str, str]]:
    """``n`` completions: distinct ground truths, or GRPO's groups of 8 completions per ground truth."""
    if not grouped:
        rng = random.Random(0)
        return [make_case(rng, n_obj, n_rel) for _ in range(n)]
    return [
        make_case(random.Random(g), n_obj, n_rel, pred_rng=random.Random(1000 * g + k))
        for g in range((n + 7) // 8)
        for k in range(8)
    ][:n]


def r1sgg_inputs(batch: list[tuple[str, str, str]]) -> dict[str, list]:
    """R1-SGG's view: ground-truth boxes normalised to [0, 1] (its datasets' convention)."""
    objects = []
    for _, objs, _ in batch:
        objects.append([{"id": o["id"], "bbox": [v / CANVAS for v in o["bbox"]]} for o in json.loads(objs)])
    return {
        "texts": [t for t, _, _ in batch],
        "objects": objects,
        "relationships": [json.loads(r) for _, _, r in batch],
    }


def ours(batch: list[tuple[str, str, str]], rounds: int) -> tuple[float, float]:
    texts, objs, rels = (list(x) for x in zip(*batch, strict=True))
    cols = {"objects": objs, "relationships": rels, "original_image_sizes": [[[CANVAS, CANVAS]]] * len(batch)}
    from r1vision.tasks.sgg import matching

    wall = cpu = float("inf")
    for _ in range(rounds):
        cache = getattr(matching, "_gt_from_json", None)
        if cache is not None:
            cache.cache_clear()  # a new step's prompts: decoded ground truth is not carried over
        specs = make_rewards("qwen2_vl", preset="r1sgg")
        t0, c0 = time.perf_counter(), time.process_time()
        for spec in specs:
            values = spec.func([None] * len(batch), texts, **cols)
            assert all(0.0 <= v <= 1.0 for v in values)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return len(batch) / wall, len(batch) / cpu


def theirs(grpo: Path, python: str, batch: list[tuple[str, str, str]], rounds: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(r1sgg_inputs(batch), f)
    try:
        out = subprocess.run(
            [python, "-c", _R1SGG, str(grpo), f.name, str(rounds)],
            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=""),
            capture_output=True,
            text=True,
            timeout=3600,
        )
    finally:
        os.unlink(f.name)
    if out.returncode:
        raise SystemExit(f"R1-SGG's side failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--r1sgg", required=True, help="a checkout of gpt4vision/R1-SGG (holds open_r1/grpo.py)")
    ap.add_argument("--r1sgg-python", default=sys.executable, help="an interpreter with spaCy, numpy, scipy")
    ap.add_argument("--n", type=int, default=200, help="completions per workload")
    ap.add_argument("--sizes", default="20x30,100x150", help="objects x relations per graph")
    ap.add_argument("--rounds", type=int, default=3, help="best of this many rounds per side")
    ap.add_argument("--alternate", type=int, default=2, help="times each side is run, alternated")
    args = ap.parse_args()
    grpo = Path(args.r1sgg) / "open_r1" / "grpo.py"
    if not grpo.is_file():
        raise SystemExit(f"--r1sgg {args.r1sgg}: no open_r1/grpo.py there")
    rows, model = [], ""
    for size in args.sizes.split(","):
        n_obj, n_rel = (int(x) for x in size.split("x"))
        for grouped in (False, True):
            n = args.n if n_obj <= 20 else max(16, args.n // 10)  # R1-SGG's side is quadratic in Python
            batch = cases(n, n_obj, n_rel, grouped)
            mine, that = (0.0, 0.0), {"wall": 0.0, "cpu": 0.0}
            for _ in range(args.alternate):
                got = ours(batch, args.rounds)
                mine = (max(mine[0], got[0]), max(mine[1], got[1]))
                other = theirs(grpo, args.r1sgg_python, batch, args.rounds)
                model = other["model"]
                that = {k: max(that[k], other[k]) for k in ("wall", "cpu")}
            label = f"{n_obj} objects / {n_rel} relations, {'groups of 8' if grouped else 'distinct'}"
            rows.append((label, n, that, mine))
            # a reward that raised inside R1-SGG's try/except scores 0 at no cost: its box reward must not be 0
            print(f"{label}: R1-SGG's mean format/node/box/edge {[round(v, 3) for v in other['mean']]}")
    print(f"R1-SGG's label model: {model}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| workload | completions | R1-SGG (4 rewards) /s CPU | r1vision (5 rewards) /s CPU | ratio |")
    print("|---|---|---|---|---|")
    for label, n, that, mine in rows:
        print(f"| {label} | {n} | {that['cpu']:.1f} | {mine[1]:.0f} | {mine[1] / that['cpu']:.1f}x |")


if __name__ == "__main__":
    main()
