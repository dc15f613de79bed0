"""The SD3.5-shaped GPU benchmark's code path, on the tiny pipeline on the CPU (``--cpu-smoke``): the in-memory
pipeline drives both the stock diffusers call and the trainer, and the replay is exact."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers.launch import launch_env, run_command
from tests.helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_t2i_gpu.py"


@pytest.mark.slow
def test_cpu_smoke_runs_the_gpu_benchmark_path(tmp_path):
    out = tmp_path / "r.json"
    env = launch_env(PYTHONPATH=str(ROOT / "src"))  # OMP_NUM_THREADS=1; from the warm interpreter
    proc = run_command([sys.executable, str(SCRIPT), "--cpu-smoke", "--json", str(out)], env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["rollout_images_per_s"] > 0 and r["stock_images_per_s"] > 0 and r["train_step_s"] > 0
    assert r["logprob_parity_max"] == 0.0  # the in-memory family replays what it sampled, exactly
    assert "| rollout images/s |" in proc.stdout
