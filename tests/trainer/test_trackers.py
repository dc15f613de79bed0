"""`--report_to tensorboard trackio` works out of the box: both are installed with r1vision and receive the
run's metrics (the events file and trackio's local database hold the logged reward)."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from tests.helpers.launch import run_command
from tests.helpers.paths import env_with_src


@pytest.mark.slow
def test_tensorboard_and_trackio_receive_the_metrics(tiny_model, color_dir, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "r1vision.cli", "grpo", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"),
            "--dataset", str(color_dir), "--output_dir", str(out), "--max_steps", "2", "--logging_steps", "1",
            "--use_cpu", "true", "--report_to", "tensorboard", "trackio", "--save_strategy", "no"]  # fmt: skip
    env = env_with_src(TRACKIO_DIR=str(tmp_path / "trackio"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    done = run_command(argv, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    events = list(out.rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard events file"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert any(t.endswith("reward") for t in tags), tags
    databases = list((tmp_path / "trackio").rglob("*.db"))
    assert databases, "no trackio database"
    with sqlite3.connect(databases[0]) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        rows = sum(db.execute(f"select count(*) from {t}").fetchone()[0] for t in tables if "metric" in t)
    assert rows >= 2, tables
