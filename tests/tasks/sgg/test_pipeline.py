"""SGG end to end with a tiny model: synth → SFT → GRPO → infer (resumable) → eval (both modes) → viz."""

import json

import pytest

from r1vision.cli import main
from tests.helpers.cli import quick_train_args, scoring_args, synth_splits
from tests.helpers.tasks import task_rows


@pytest.fixture(scope="module")
def sgg_run(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("sgg")
    data = root / "data"
    synth_splits("sgg", data, {"train": 8, "val": 4}, "--synth_options", '{"preset": "demo"}')
    common = quick_train_args(data, "sgg", batch=4, max_pixels=7056)
    base = tiny_model("qwen2_vl")
    assert main(["sft", "--model", base, "--output_dir", str(root / "sft"), *common]) == 0
    assert (
        main(
            [
                "grpo",
                "--model",
                str(root / "sft"),
                "--output_dir",
                str(root / "grpo"),
                "--num_generations",
                "4",
                "--max_completion_length",
                "16",
                *common,
            ]
        )
        == 0
    )
    return root, data


def test_grpo_logged_every_sgg_reward(sgg_run):
    root, _ = sgg_run
    header = (root / "grpo" / "metrics.csv").read_text().splitlines()[0]
    for name in ("format", "node", "box", "edge"):
        assert f"rewards/{name}/mean" in header, name


def test_infer_eval_viz(sgg_run, capsys):
    root, data = sgg_run
    pred = root / "pred"
    args = [
        "infer",
        "--task",
        "sgg",
        "--model",
        str(root / "grpo"),
        "--dataset",
        str(data),
        "--split",
        "val",
        "--output_dir",
        str(pred),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "24",
        "--max-pixels",
        "7056",
    ]
    assert main([*args, "--limit", "2"]) == 0
    assert main(args) == 0
    lines = [json.loads(x) for x in (pred / "shard-00000.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in lines) == [0, 1, 2, 3]
    assert {"image_id", "model_family", "original_image_size", "image_size"} <= set(lines[0])
    for compat in (None, "r1sgg"):
        out = root / f"metrics_{compat}.json"
        cmd = scoring_args("eval", "sgg", data, pred, "--split", "val", "--json-out", str(out))
        assert main(cmd + (["--compat", compat] if compat else [])) == 0
        metrics = json.loads(out.read_text())
        for key in ("R@20", "R@50", "R@100", "mR@20", "zR@20", "ngR@20", "parse_failure_rate", "num_images"):
            assert key in metrics, key
        # images without GT relations have no recall to measure; the rest are counted
        assert 0 < metrics["num_images"] <= 4 if compat is None else metrics["num_images"] <= 4
        counts = ("num_images", "num_gt_images", "num_predictions", "unmatched_predictions")
        assert all(0.0 <= v <= 1.0 for k, v in metrics.items() if k not in counts)
        assert metrics["coverage"] == 1.0 and metrics["num_predictions"] == 4
    assert (
        main(
            [
                *scoring_args("viz", "sgg", data, pred),
                "--split",
                "val",
                "--index",
                "0",
                "1",
                "--output_dir",
                str(root / "viz"),
            ]
        )
        == 0
    )
    pngs = sorted((root / "viz").glob("*.png"))
    assert len(pngs) == 2 and pngs[0].stat().st_size > 1000


def test_eval_perfect_predictions_score_full_recall(sgg_run, tmp_path):
    """Ground truth written as SFT targets, evaluated as predictions: every relation is recalled."""
    _, data = sgg_run
    rows = task_rows("sgg", data, "val", family="qwen2_vl")
    pred = tmp_path / "perfect.jsonl"
    with pred.open("w") as f:
        for i, row in enumerate(rows):
            f.write(
                json.dumps(
                    {
                        "index": i,
                        "image_id": row["image_id"],
                        "model_family": "qwen2_vl",
                        "completion": row["completion"][0]["content"][0]["text"],
                    }
                )
                + "\n"
            )
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "eval",
                "--task",
                "sgg",
                "--dataset",
                str(data),
                "--pred",
                str(pred),
                "--split",
                "val",
                "--json-out",
                str(out),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    assert metrics["ngR@100"] == pytest.approx(1.0) and metrics["parse_failure_rate"] == 0.0
