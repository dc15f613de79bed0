"""scripts/gpu_check.sh --cpu-smoke: the GPU check's phases at tiny sizes on the CPU (env with the static
sync checks on the real 7B layout, build, stock TRL vs r1vision runs plain and under the shipped
zero3.json, the sync probe, the report), ending GPU-CHECK: PASS."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.launch import launch_env, warm_python
from tests.helpers.paths import ROOT


def _module():
    """scripts/gpu_check.py imported as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cpu_smoke_runs_every_phase(tmp_path):
    out = tmp_path / "gc"
    # every Python process of the check forks from the tests' warm interpreter (tests/helpers/warm_client.py)
    env = launch_env(PYTHON=warm_python())
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu-smoke", "--out", str(out), "--budget", "900"],
        capture_output=True, text=True, env=env, timeout=1200,
    )  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == "GPU-CHECK: PASS", (
        done.stdout[-4000:] + done.stderr[-2000:]
    )
    report = json.loads((out / "report.json").read_text())
    runs = report["runs"]
    assert set(runs) == {
        "trl-full",
        "r1v-full",
        "r1v-lora",
        "trl-lora",
        "r1v-z3-lora",
        "r1v-z3-full",
        "trl-z3-full",
        "trl-fsdp-full",
        "r1v-fsdp-full",
        "r1v-fsdp-lora",
    }
    assert all(r["losses_finite"] and r["weights_moved"] for r in runs.values())
    # each run trained as launched: ZeRO-3 partitions, the shipped fsdp2.yaml shards with DTensors
    layouts = {name: r["layout"] for name, r in runs.items()}
    assert layouts == {name: layout for name, _, _, layout, _ in _module().RUNS}
    assert {"zero3", "fsdp2", "plain"} == set(layouts.values())
    assert any(text.startswith("r1v-fsdp-full / trl-fsdp-full: step time") for _, text in report["checks"])
    for name in ("r1v-lora", "r1v-z3-lora"):
        probe = runs[name]["probe"]
        assert probe["fused_gaps"] == [] and probe["bad_roots"] == [] and probe["base_drift"] is False
        assert probe["merge_rel_error"] < 1e-5 and probe["tensors"] > 0
        assert runs[name]["vision_input_grad_hooks"] == []
    assert any(
        "q_proj v_proj on the 7B layout" in text and status == "PASS" for status, text in report["checks"]
    )
    assert "GPU-CHECK: PASS" in (out / "report.md").read_text()
    t2i = report["t2i"]  # the text-to-image phase ran the benchmark's code path on the tiny pipeline
    assert t2i["rollout_images_per_s"] > 0 and t2i["logprob_parity_max"] == 0.0
    assert any(
        text.startswith("t2i replay log-prob parity") and status == "PASS"
        for status, text in report["checks"]
    )
    assert all(r["steps"] == 2 for r in runs.values())


def test_a_rerun_into_the_same_folder_starts_each_run_clean(tmp_path):
    """The r1vision runs refuse a used output_dir: a second check into one --out reported FAIL before."""
    module = _module()
    (tmp_path / "trainer" / "r1v-full" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1v-full.json").write_text("{}")
    (tmp_path / "runs" / "trl-full.json").write_text("{}")
    module.fresh_run(tmp_path, "r1v-full")
    assert (
        not (tmp_path / "trainer" / "r1v-full").exists()
        and not (tmp_path / "runs" / "r1v-full.json").exists()
    )
    assert (tmp_path / "runs" / "trl-full.json").exists()  # another run's result stays


@pytest.mark.slow
def test_the_check_refuses_a_machine_without_cuda_outside_smoke_mode(tmp_path):
    """Without --cpu-smoke a machine without CUDA is a FAIL (the old check passed while training on CPU)."""
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here: the refusal does not apply (the full check would run)")
    env = launch_env(PYTHON=warm_python())
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--out", str(tmp_path / "gc")],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert "FAIL  env: torch.cuda.is_available() is False" in done.stdout
    assert done.returncode == 1 and done.stdout.strip().endswith("GPU-CHECK: FAIL")


def test_a_run_that_trained_unsharded_fails_the_check():
    """An FSDP2 run whose processes ran as plain DDP (accelerate's CPU fallback, a missing config) would
    time unsharded training against stock TRL's sharded one: the report fails it."""
    module = _module()
    run = {"trainer": "r1v", "losses_finite": True, "weights_moved": True, "param_dtype": "torch.bfloat16",
           "step_seconds": 1.0, "peak_gib": 5.0, "vision_input_grad_hooks": []}  # fmt: skip
    checks = module.judge({"r1v-fsdp-full": run | {"layout": "plain"}}, gpu=True, estimates={})
    assert ("FAIL", "r1v-fsdp-full: launched as fsdp2 but trained plain (not sharded)") in checks
    checks = module.judge({"r1v-fsdp-full": run | {"layout": "fsdp2"}}, gpu=True, estimates={})
    assert [status for status, _ in checks] == ["PASS"]


def test_runs_selects_a_subset_and_names_an_unknown_one(tmp_path):
    """``--runs`` picks the runs to do (a short GPU session runs only the FSDP2 pair); a typo exits 2 at once."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--cpu-smoke", "--out", str(tmp_path),
         "--runs", "trl-fsdp-full,r1v-fsdp-ful"],
        capture_output=True, text=True, env=launch_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--runs: unknown run r1v-fsdp-ful; the runs are trl-full," in done.stderr
    assert not (tmp_path / "report.json").exists()
