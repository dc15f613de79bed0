"""Acceptance: every shipped recipe, as shipped, through the user's whole path on real-config tiny models.

For every file in ``configs/recipes/`` and the model family it is written for (``color_smoke``: all three
families plus the project's own tiny fixture), on tiny random-weight models built from the real Hub files
in ``tests/fixtures/realcfg`` (real 151,936-token tokenizer, chat template, preprocessor config; only size
fields of config.json shrunk): ``sft`` (for the SFT recipe) → ``grpo`` → ``infer`` on the GRPO output (a
LoRA adapter folder for the SVG recipes) → ``eval``. Asserted: every exit code, metrics.csv one row per step,
weights changed wherever a gradient was logged, and the saved folder loads with plain
``AutoModelForImageTextToText`` / ``AutoTokenizer`` / ``AutoImageProcessor`` in a fresh process that never
imports r1vision, its JSON naming only stock classes. (Stock ``AutoProcessor`` needs torchvision for the
Qwen-VL video processor, which has no build for this CPU torch: see ENVIRONMENT-NOTES.)

Overrides: only ``--model/--dataset/--output_dir/--max_steps 1`` plus, for the recipes whose completions
are 1,024-4,096 tokens, ``--max_completion_length 16`` and the same ``--max_new_tokens`` for ``infer`` (a random
151k-vocabulary model never stops, and 8 x 4,096 generated tokens take minutes on a CPU). ``infer`` is not
given the task: it takes it, the options and the pixel budget from the run's saved settings. Training
rows: one generation round per recipe (1 prompt; 128 for the MAYE geometry recipe, which draws 128
single-response prompts per round).

Runtime: 1:05 for the module on a quiet 2-core machine (2026-11-30; 1:11 with cold workers, 3:36 while TRL's
fused LM head still projected every prompt position on a CPU, see r1vision/trainer/fused_head.py): two
worker processes (one per core, forked from the tests' warm interpreter: tests/helpers/launch.py) take the
chains largest first, each the next one nobody has claimed, then one fresh interpreter that never imported
r1vision stock-loads every saved folder.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.launch import launch_env, run_command
from tests.helpers.paths import ROOT, SRC
from tests.helpers.stock import stock_load_many

pytestmark = pytest.mark.slow  # the whole recipe chain: minutes

RECIPES = ROOT / "configs" / "recipes"
LONG = ["--max_completion_length", "16"]  # the one length override; see the module docstring

# recipe chain id -> (recipe files in order, model family, task, extra args per GRPO command)
CHAINS = {
    "color_smoke-qwen2_vl": (["color_smoke.yaml"], "real:qwen2_vl", "color", []),
    "color_smoke-qwen2_5_vl": (["color_smoke.yaml"], "real:qwen2_5_vl", "color", []),
    "color_smoke-qwen3_vl": (["color_smoke.yaml"], "real:qwen3_vl", "color", []),
    "color_smoke-fixture": (["color_smoke.yaml"], "tiny:qwen2_vl", "color", []),
    "sgg_sft+sgg_grpo-qwen2_vl": (["sgg_sft.yaml", "sgg_grpo.yaml"], "real:qwen2_vl", "sgg", LONG),
    "geometry_grpo-qwen2_5_vl": (["geometry_grpo.yaml"], "real:qwen2_5_vl", "geometry", LONG),
    "motion_grpo-qwen3_vl": (["motion_grpo.yaml"], "real:qwen3_vl", "motion", []),  # video rows
    "svg_grpo-qwen3_vl": (["svg_grpo.yaml"], "real:qwen3_vl", "svg", LONG),
    "svg_grpo_24gb-qwen2_5_vl": (["svg_grpo_24gb.yaml"], "real:qwen2_5_vl", "svg", LONG),
    # Per-rank vLLM servers need vLLM (tests/generation/test_vllm_server.py runs them in .venv-vllm); here the
    # recipe runs with HF generation, everything else as shipped (LoRA, frozen tower, lengths).
    "sgg_grpo_24gb-qwen2_5_vl": (
        ["sgg_grpo_24gb.yaml"],
        "real:qwen2_5_vl",
        "sgg",
        [*LONG, "--generation_backend", "hf", "--vllm_server_per_rank", "false"],
    ),
}

# Seconds per chain on a quiet 2-core machine (the DRIVER's "seconds", summed), largest first in the plan.
COST = {
    "geometry_grpo-qwen2_5_vl": 24,  # 128 rollouts
    "sgg_sft+sgg_grpo-qwen2_vl": 22,
    "sgg_grpo_24gb-qwen2_5_vl": 16,
    "motion_grpo-qwen3_vl": 8,
    "svg_grpo-qwen3_vl": 6,
    "svg_grpo_24gb-qwen2_5_vl": 5,
    "color_smoke-qwen2_vl": 3,
    "color_smoke-qwen2_5_vl": 3,
    "color_smoke-qwen3_vl": 3,
    "color_smoke-fixture": 1,
}

# Each worker takes the next chain nobody has claimed (a file created exclusively), so the two cores stay
# busy until the last chain ends whatever the chains cost; the plan lists the largest first.
DRIVER = r"""
import json, os, sys, time, traceback
from r1vision.cli import main
plan, out, claims = sys.argv[1:4]
results = []
for name, commands in json.loads(open(plan).read()):
    try:
        os.close(os.open(os.path.join(claims, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        continue
    for argv in commands:
        start = time.perf_counter()
        try:
            rc = main(argv)
            error = ""
        except SystemExit as exc:
            rc, error = exc.code if isinstance(exc.code, int) else 1, str(exc)
        except BaseException:
            rc, error = 1, traceback.format_exc()[-3000:]
        results.append({"chain": name, "argv": argv, "rc": rc, "error": error,
                        "seconds": round(time.perf_counter() - start, 1)})
        if rc != 0:
            break
    with open(out, "w") as f:
        json.dump(results, f)
with open(out, "w") as f:  # also when the other worker took every chain
    json.dump(results, f)
"""


def test_every_recipe_is_covered():
    covered = {r for recipes, *_ in CHAINS.values() for r in recipes}
    # the text-to-image recipes (t2i_*) run in tests/configs/test_t2i_recipes.py
    assert covered == {p.name for p in RECIPES.glob("*.yaml") if not p.name.startswith("t2i_")}


def _model(spec: str) -> str:
    kind, family = spec.split(":")
    if kind == "real":
        from tests.helpers.realcfg import realcfg_model_path

        return str(realcfg_model_path(family))
    from r1vision.testing.tiny import tiny_model_path

    return str(tiny_model_path(family))


def _recipe(recipe: str) -> dict:
    import yaml

    return yaml.safe_load((RECIPES / recipe).read_text())


def _max_steps(recipe: str) -> int:
    """1, or 2 for recipes with a warm-up: it makes step 1's learning rate 0, so only step 2 moves weights."""
    return 2 if _recipe(recipe).get("warmup_steps") else 1


def _commands(name: str, work: Path, data: dict[str, Path]) -> list[list[str]]:
    recipes, spec, task, extra = CHAINS[name]
    model, out = _model(spec), work / name
    commands = []
    for i, recipe in enumerate(recipes):
        kind = "sft" if "sft" in recipe else "grpo"
        run = out / f"{i}-{kind}"
        commands.append([kind, "--config", str(RECIPES / recipe), "--model", model, "--dataset", str(data[task]),
                         "--output_dir", str(run), "--max_steps", str(_max_steps(recipe)),
                         *(extra if kind == "grpo" else [])])  # fmt: skip
        model = str(run)  # the next stage trains on from this output (an adapter folder for LoRA)
    preds = out / "preds"
    # No --task: infer takes it (and the prompt options) from the run's settings. The length is the
    # training override's, where there is one (else the task's own inference default, up to 4,096 tokens).
    length = extra[extra.index("--max_completion_length") + 1] if "--max_completion_length" in extra else None
    commands.append(
        ["infer", "--model", model, "--dataset", str(data[task]), "--output_dir", str(preds),
         *(["--max_new_tokens", length] if length else [])]
    )  # fmt: skip
    commands.append(
        [
            "eval",
            "--task",
            task,
            "--dataset",
            str(data[task]),
            "--pred",
            str(preds),
            "--json-out",
            str(out / "eval.json"),
        ]
    )
    return commands


@pytest.fixture(scope="session")
def acceptance(tmp_path_factory):
    """Run every chain once, split over two worker processes (one per core); results keyed by chain."""
    from r1vision.tasks import get_task

    work = tmp_path_factory.mktemp("acceptance")
    data = {}
    # Training rows: as few as one generation round of each recipe draws (1 prompt; geometry's MAYE recipe
    # draws 128 prompts of one response each per round), so every step is as small as the recipe allows.
    for task, n, opts in (
        ("color", 1, {}),
        ("sgg", 1, {"preset": "demo"}),
        ("geometry", 128, {}),
        ("svg", 1, {}),
        ("motion", 1, {}),
    ):
        data[task] = work / "data" / task
        get_task(task).synth(data[task], n, seed=0, split="train", options=opts)
        get_task(task).synth(data[task], 2, seed=1, split="test", options=opts)
    # R1VISION_ACCEPTANCE=name,name runs only those chains (while working on one recipe).
    names = [n for n in CHAINS if n in os.environ.get("R1VISION_ACCEPTANCE", n).split(",")]
    names.sort(key=lambda n: -COST.get(n, 0))
    env = launch_env(PYTHONPATH=str(SRC))
    plan, claims = work / "plan.json", work / "claims"
    plan.write_text(json.dumps([(n, _commands(n, work, data)) for n in names]))
    claims.mkdir()
    workers = min(2, len(names))

    def worker(k: int) -> None:  # a warm interpreter each (tests/helpers/launch.py), running side by side
        argv = [sys.executable, "-c", DRIVER, str(plan), str(work / f"res{k}.json"), str(claims)]
        proc = run_command(argv, cwd=work, env=env, timeout=1200)
        (work / f"worker{k}.log").write_text(proc.stdout + proc.stderr)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker, range(workers)))
    results: dict[str, list[dict]] = {}
    for k in range(workers):
        path = work / f"res{k}.json"
        tail = (work / f"worker{k}.log").read_text()[-4000:]
        assert path.exists(), f"worker {k} wrote no results:\n{tail}"
        for r in json.loads(path.read_text()):
            results.setdefault(r["chain"], []).append(r)
    # Every saved training folder through stock transformers, in one fresh interpreter for all of them (one
    # per folder cost ~10 s of start-up each).
    saved = [_saved(work / n / stage) for n, steps in results.items() if all(s["rc"] == 0 for s in steps)
             for stage in _stages(n)]  # fmt: skip
    return work, results, stock_load_many(saved)


def _stages(name: str) -> list[str]:
    """The run folder names of a chain's training stages (``0-sft``, ``1-grpo``, ...)."""
    return [f"{i}-{'sft' if 'sft' in recipe else 'grpo'}" for i, recipe in enumerate(CHAINS[name][0])]


def _saved(run: Path) -> Path:
    """The folder a user loads: the merged model of a LoRA run, else the run folder."""
    return run / "merged" if (run / "adapter_config.json").exists() else run


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _metrics(run: Path) -> list[dict]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", list(CHAINS))
def test_recipe_chain(acceptance, name):
    work, results, loaded = acceptance
    steps = results.get(name, [])
    failed = [s for s in steps if s["rc"] != 0]
    assert not failed, (
        f"{name}: `r1vision {' '.join(failed[0]['argv'][:1])}` exited {failed[0]['rc']}:\n{failed[0]['error']}"
    )
    recipes, spec, task, _ = CHAINS[name]
    assert len(steps) == len(recipes) + 2  # training stage(s), infer, eval
    base = Path(_model(spec))
    for recipe, stage in zip(recipes, _stages(name), strict=True):
        kind = stage.split("-", 1)[1]
        run = work / name / stage
        rows = _metrics(run)
        steps, every = _max_steps(recipe), int(_recipe(recipe).get("logging_steps", 10))
        logged = sorted({s for s in range(1, steps + 1) if s % every == 0} | {steps})  # + the final summary
        assert [int(r["step"]) for r in rows] == logged, rows  # one row per logged step, none lost or doubled
        saved = _saved(run)
        before, after = _weights(base), _weights(saved)
        assert before.keys() == after.keys()
        changed = any(not before[k].float().equal(after[k].float()) for k in before)
        # Weights move iff some step had a gradient and a non-zero learning rate. SFT always has a gradient.
        # GRPO on a random model whose rewards have no spread in a group (no completion is a valid SVG or
        # graph) has zero advantages, hence no gradient: then the weights must stay exactly as they were.
        moved = kind == "sft" or any(
            float(r.get("grad_norm") or 0) != 0 and float(r.get("learning_rate") or 0) != 0 for r in rows
        )
        assert changed == moved, (name, recipe, rows)
        found = loaded[str(saved)]
        assert found["model"].endswith("ForConditionalGeneration")
        assert found["names"] and all(n and "ImageOnly" not in n for n in found["names"]), found
        # stock Qwen-VL processors (with torchvision, or in vLLM) build a video processor from this file: every
        # saved folder has one, the base's own when the base had one (Qwen3-VL's Hub folder does)
        video = "video_preprocessor_config.json"
        assert (saved / video).is_file(), video
        if (Path(_model(spec)) / video).is_file():
            assert (saved / video).read_text() == (Path(_model(spec)) / video).read_text()
        run_info = json.loads((saved / "r1vision_run.json").read_text())
        assert run_info["task"] == task
        base = saved
    preds = sorted((work / name / "preds").glob("shard-*.jsonl"))
    lines = [json.loads(line) for p in preds for line in p.read_text().splitlines()]
    assert sorted(r["index"] for r in lines) == [0, 1]
    metrics = json.loads((work / name / "eval.json").read_text())
    assert metrics and all(isinstance(v, (int, float)) for v in metrics.values())


def test_a_grpo_recipe_moves_the_weights(acceptance):
    """At least one GRPO recipe gets reward spread on a random model and really updates: geometry's
    ``no_eos`` reward differs between completions that stop and ones that run to the limit."""
    work, results, _ = acceptance
    run = work / "geometry_grpo-qwen2_5_vl" / "0-grpo"
    assert all(s["rc"] == 0 for s in results["geometry_grpo-qwen2_5_vl"])
    rows = _metrics(run)
    assert any(float(r.get("reward_std") or 0) > 0 and float(r.get("grad_norm") or 0) > 0 for r in rows), rows
    before, after = _weights(Path(_model("real:qwen2_5_vl"))), _weights(run)
    assert any(not before[k].equal(after[k]) for k in before)
