"""The CLI end to end: synth → sft → grpo (from the SFT folder) → infer (resumable) → eval."""

import csv
import json
import logging
import subprocess
import sys

import pytest

from r1vision.cli import main
from r1vision.vision.records import RecordWriter, read_predictions
from tests.helpers.cli import quick_train_args, synth_splits


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("cli")
    data = root / "data"
    synth_splits("color", data, {"train": 16, "test": 6})
    recipe = root / "sft.yaml"
    recipe.write_text(
        "per_device_train_batch_size: 4\nmax_steps: 3\nlearning_rate: 0.002\nlogging_steps: 1\n"
        "report_to: []\nsave_strategy: 'no'\nuse_cpu: true\nmax_pixels: 3136\n"
    )
    sft_out = root / "sft"
    base = tiny_model("qwen2_vl")
    assert (
        main(
            [
                "sft",
                "--config",
                str(recipe),
                "--model",
                base,
                "--dataset",
                str(data),
                "--task",
                "color",
                "--output_dir",
                str(sft_out),
                "--max_steps",
                "2",
            ]
        )
        == 0
    )
    grpo_out = root / "grpo"
    assert (
        main(
            [
                "grpo",
                "--model",
                str(sft_out),
                "--output_dir",
                str(grpo_out),
                "--num_generations",
                "4",
                "--max_completion_length",
                "8",
                "--reward_weights",
                "1.0",
                "0.25",
                *quick_train_args(data, "color", batch=4, max_pixels=3136, max_steps=2),
            ]
        )
        == 0
    )
    return root, data, sft_out, grpo_out


def test_sft_output_is_a_model_grpo_trains_further(pipeline):
    _, _, sft_out, grpo_out = pipeline
    run = json.loads((grpo_out / "r1vision_run.json").read_text())
    assert run["task"] == "color" and run["reward_weights"] == {"accuracy": 1.0, "format": 0.25}
    assert run["reward_funcs"] == ["accuracy", "format"]
    assert (sft_out / "processor_config.json").exists() and (sft_out / "model.safetensors").exists()
    with open(sft_out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    # the CLI override (--max_steps 2) beats the YAML value (3)
    assert [r["step"] for r in rows] == ["1", "2"]
    with open(grpo_out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["1", "2"]
    for column in (
        "loss",
        "reward",
        "reward_std",
        "rewards/color_accuracy/mean",
        "rewards/color_format/mean",
        "completions/mean_length",
        "learning_rate",
    ):
        assert column in rows[0], column
    config = json.loads((grpo_out / "config.json").read_text())
    assert config["model_type"] == "qwen2_vl"


def test_infer_is_resumable_and_eval_scores(pipeline, capsys, caplog):
    root, data, _, grpo_out = pipeline
    out = root / "pred"
    args = [
        "infer",
        "--task",
        "color",
        "--model",
        str(grpo_out),
        "--dataset",
        str(data),
        "--split",
        "test",
        "--output_dir",
        str(out),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "6",
        "--max-pixels",
        "3136",
    ]
    assert main([*args, "--limit", "3"]) == 0
    first = read_predictions(out)
    assert [r["index"] for r in first] == [0, 1, 2]
    # a kill mid-write leaves a torn line: it is dropped and that row regenerated, nothing duplicated
    shard = out / "shard-00000.jsonl"
    shard.write_text(shard.read_text() + '{"index": 3, "compl')
    assert main(args) == 0
    records = read_predictions(out)
    assert [r["index"] for r in records] == list(range(6))
    lines = [json.loads(x) for x in shard.read_text().splitlines()]
    assert len(lines) == 6 and [r["completion"] for r in lines[:3]] == [r["completion"] for r in first]

    json_out = root / "metrics.json"
    eval_args = ["eval", "--task", "color", "--dataset", str(data), "--pred", str(out),
                 "--json-out", str(json_out)]  # fmt: skip
    assert main(eval_args) == 0
    metrics = json.loads(json_out.read_text())
    assert metrics["num_items"] == 6 and metrics["missing_predictions"] == 0
    assert metrics["coverage"] == 1.0 and metrics["records_without_completion"] == 0
    assert 0.0 <= metrics["reward/accuracy"] <= 1.0

    # eval on a folder a killed infer left: the torn last line is skipped with a notice; a record whose
    # completion is lost is a failure in coverage, not a silent 0
    kept = [json.loads(x) for x in shard.read_text().splitlines()[:5]]
    del kept[1]["completion"]
    shard.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"index": 5, "compl')
    with caplog.at_level(logging.WARNING, logger="r1vision.vision.records"):
        assert main(eval_args) == 0
    assert f"{shard}:6: skipped a torn last line" in caplog.text
    capsys.readouterr()
    metrics = json.loads(json_out.read_text())
    assert metrics["missing_predictions"] == 1 and metrics["records_without_completion"] == 1
    assert metrics["coverage"] == pytest.approx(4 / 6)
    # a damaged line in the middle is not a kill: one line naming the file and line, exit 2
    shard.write_text(json.dumps(kept[0]) + "\nnot json\n" + json.dumps(kept[2]) + "\n")
    assert main(eval_args) == 2
    err = capsys.readouterr().err
    assert f"{shard}:2: not a JSON line" in err and "Traceback" not in err


def test_record_writer_skips_done_indices(tmp_path):
    w = RecordWriter(tmp_path, rank=1)
    w.write({"index": 5, "completion": "a"})
    assert RecordWriter(tmp_path, rank=0).done == {5}


def test_console_script_and_tasks_listing():
    out = subprocess.run(
        [sys.executable, "-m", "r1vision.cli", "tasks"], capture_output=True, text=True, check=True
    )
    assert "color" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "r1vision.cli", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command" in bad.stderr
