"""The ``infer`` runner: settings from the run and the task, prompts, rows split across processes."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.helpers.launch import launch_env, run_command, warm_python
from tests.helpers.paths import ROOT, SRC

RECIPES = sorted((ROOT / "configs" / "recipes").glob("*.yaml"))


# ------------------------------------------------------------------------------------ 8. torchrun on CPU
@pytest.mark.slow
def test_torchrun_inference_splits_rows(tiny_model, color_dir, tmp_path):
    """Under `torchrun --nproc 2` on CPU both processes were rank 0 and wrote every row twice."""
    # torchrun is `python -m torch.distributed.run`; from the warm interpreter (tests/helpers/launch.py).
    # --standalone: a free rendezvous port, so concurrent test runs do not collide on torchrun's 29500
    cmd = [
        warm_python(),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "r1vision.cli",
        "infer",
        "--task",
        "color",
    ]
    cmd += ["--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir), "--split", "test"]
    cmd += ["--output_dir", str(tmp_path / "p"), "--max-new-tokens", "2"]
    proc = run_command(cmd, env=launch_env(PYTHONPATH=str(SRC)), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shards = sorted((tmp_path / "p").glob("shard-*.jsonl"))
    indices = [json.loads(line)["index"] for s in shards for line in s.read_text().splitlines()]
    assert len(shards) == 2 and sorted(indices) == list(range(8))


# ---------------------------------------------------------------------------------- 4. infer settings
def test_infer_defaults_come_from_the_task_and_the_run(tmp_path):
    """infer used 256 new tokens and the open prompt for every model and task."""
    from r1vision.runners.infer import inference_settings
    from r1vision.trainer.run_info import write_run_info

    plain = inference_settings(str(tmp_path), "sgg")
    assert plain["max_new_tokens"] >= 1400 and plain["task_options"] == {}  # a 20+30 graph: ~1,323 tokens
    assert inference_settings(str(tmp_path), "svg")["max_new_tokens"] >= 2048
    with pytest.raises(ValueError, match="pass --task"):
        inference_settings(str(tmp_path))
    run = {"task": "sgg", "task_options": {"prompt": "closed", "think": True}, "max_completion_length": 777,
           "min_pixels": 3136, "max_pixels": 200704}  # fmt: skip
    write_run_info(tmp_path, run)
    got = inference_settings(str(tmp_path))
    # the run's rollout length (777) is not an answer length: the task's inference default wins
    assert (got["task"], got["task_options"], got["max_new_tokens"]) == ("sgg", run["task_options"], 2048)
    assert (
        got["sources"]["max_new_tokens"] == "task 'sgg' default" and got["sources"]["task_options"] == "run"
    )
    assert (got["min_pixels"], got["max_pixels"]) == (3136, 200704)
    mine = inference_settings(str(tmp_path), "sgg", 99, {"prompt": "open"}, max_pixels=50176)
    assert (mine["max_new_tokens"], mine["task_options"], mine["max_pixels"]) == (
        99,
        {"prompt": "open", "think": True},  # merged into the run's options
        50176,
    )
    assert mine["sources"]["max_new_tokens"] == "command line"
    other = inference_settings(str(tmp_path), "geometry")  # another task: the run's options do not apply
    assert other["task_options"] == {} and other["max_new_tokens"] == 2048 and other["max_pixels"] is None


def test_infer_cli_uses_the_runs_prompt(tiny_model, tmp_path, monkeypatch):
    """`infer --model <r1vision output>` builds the prompt variant the model was trained with."""
    import r1vision.runners.infer as infer
    from r1vision.cli import main

    seen = []
    real_generate = infer.generate

    def spy(model, processor, rows, budget, options, **kw):
        seen.append((json.dumps([r["prompt"] for r in rows]), options.max_new_tokens))
        return real_generate(model, processor, rows, budget, options, **kw)

    monkeypatch.setattr(infer, "generate", spy)
    from r1vision.tasks import get_task
    from r1vision.trainer.run_info import write_run_info

    data = tmp_path / "sgg"
    get_task("sgg").synth(data, 2, seed=0, split="test", options={"preset": "demo"})
    model = tmp_path / "model"
    os.symlink(tiny_model("qwen2_vl"), model)
    write_run_info(
        tmp_path / "run", {"task": "sgg", "task_options": {"prompt": "closed"}, "max_completion_length": 3}
    )
    for name in os.listdir(model):  # an r1vision output: the model files plus r1vision_run.json
        os.symlink(model / name, tmp_path / "run" / name)
    out = tmp_path / "p"
    assert (
        main(
            [
                "infer",
                "--model",
                str(tmp_path / "run"),
                "--dataset",
                str(data),
                "--output_dir",
                str(out),
                "--max_new_tokens",
                "3",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in (out / "shard-00000.jsonl").read_text().splitlines()]
    assert len(records) == 2
    assert seen and all(tokens == 3 for _, tokens in seen)  # the command line's length
    assert all("Object categories" in prompt for prompt, _ in seen)  # the closed prompt lists the vocabulary


# -------------------------------------------------------------------------------- preemption of infer
@pytest.mark.slow
def test_a_sigterm_stops_infer_between_batches_and_the_same_command_continues(tiny_model, tmp_path):
    """Slurm's SIGTERM used to kill `infer` mid-batch. Now the batch in flight finishes, the command exits 75
    (as the trainers do on preemption, so `sbatch --requeue` reruns it) naming where it stopped, every written
    line is a whole record, and rerunning the same command writes the rest with no duplicate."""
    import signal
    import time

    from r1vision.tasks.color.synth import synth_color

    n = 120
    synth_color(tmp_path / "data", n, seed=0, split="test")
    out = tmp_path / "p"
    # from the warm interpreter (tests/helpers/launch.py), which passes the SIGTERM on to the command
    cmd = [warm_python(), "-m", "r1vision.cli", "infer", "--task", "color", "--model", tiny_model("qwen2_vl")]
    cmd += ["--dataset", str(tmp_path / "data"), "--split", "test", "--output_dir", str(out)]
    cmd += ["--batch_size", "1", "--max_new_tokens", "24"]
    env = launch_env(PYTHONPATH=str(SRC))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shard = out / "shard-00000.jsonl"
    deadline = time.monotonic() + 300
    while not (shard.exists() and shard.read_text().count("\n") >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 75, err[-3000:]
    line = [x for x in err.splitlines() if "SIGTERM received" in x]
    assert len(line) == 1 and "the same command continues" in line[0], err[-3000:]
    first = [json.loads(x)["index"] for x in shard.read_text().splitlines()]  # every line decodes
    assert 2 <= len(first) < n

    again = run_command(cmd, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    indices = [json.loads(x)["index"] for x in shard.read_text().splitlines()]
    assert sorted(indices) == list(range(n)) and indices[: len(first)] == first


def test_infer_generates_video_rows_with_the_runs_video_budget(tiny_model, motion_dir, tmp_path):
    """Video rows: sampled and resized under the training run's --video_* budget (or the command line's),
    recorded per row, refused on the vLLM backend in one line."""
    import shutil

    from r1vision.runners.infer import inference_settings, run_inference
    from r1vision.tasks import get_task
    from r1vision.trainer.run_info import write_run_info

    model = tmp_path / "model"
    shutil.copytree(tiny_model("qwen2_vl"), model)
    write_run_info(model, {"task": "motion", "video_max_frame_pixels": 28 * 28, "video_max_frames": 4})
    settings = inference_settings(str(model), video={"video_max_frames": 2})
    assert settings["video"] == {"video_max_frame_pixels": 784, "video_max_frames": 2}
    assert settings["sources"]["video"] == "run + command line"
    task = get_task("motion")
    out = run_inference(task, task.parse_options(), str(model), str(motion_dir), tmp_path / "pred", split="test",
                        batch_size=2, video=settings["video"], progress=False)  # fmt: skip
    records = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert sorted(r["index"] for r in records) == [0, 1, 2, 3]
    # 8 frames in the folder, 2 kept (max_frames), one 28x28 token each, from 56x56 originals
    assert all(r["video_size"] == [2, 28, 28] and r["original_video_size"] == [8, 56, 56] for r in records)
    saved = json.loads((out / "r1vision_infer.json").read_text())["video"]
    assert saved["max_frames"] == 2 and saved["max_frame_pixels"] == 784
