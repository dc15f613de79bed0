"""Geometry end to end with a tiny model: GRPO logs MAYE's metrics; infer with k samples → eval pass@k."""

import csv
import json

from r1vision.cli import main
from r1vision.tasks.geometry.metrics import REFLECTION_WORDS
from tests.helpers.cli import infer_args, quick_train_args, scoring_args, synth_splits


def test_geometry_pipeline_logs_maye_metrics_and_scores_pass_at_k(tmp_path, tiny_model):
    data = tmp_path / "data"
    synth_splits("geometry", data, {"train": 4, "test": 3})
    base = tiny_model("qwen2_5_vl")
    assert (
        main(
            [
                "grpo",
                "--model",
                base,
                "--output_dir",
                str(tmp_path / "grpo"),
                "--num_generations",
                "4",
                "--max_completion_length",
                "12",
                *quick_train_args(data, "geometry", batch=4, max_pixels=3136),
            ]
        )
        == 0
    )
    with open(tmp_path / "grpo" / "metrics.csv") as f:
        row = next(csv.DictReader(f))
    analysis = [
        "reflection_ratio",
        "reflection_ratio_in_correct_answers",
        "reflection_ratio_in_incorrect_answers",
        "correct_ratio_in_reflection_texts",
        "correct_ratio_in_no_reflection_texts",
    ]
    # the word list is MAYE's definition (metrics.REFLECTION_WORDS); its 15 entries are checked in
    # test_geometry_metrics, so here we only check that every one of them is logged
    words = REFLECTION_WORDS
    assert len(words) == 15
    expected = [
        "maye/accuracy",
        "maye/response_length/mean",
        "maye/response_length/clip_ratio",
        "rewards/accuracy/mean",
        "rewards/no_eos/mean",
    ]
    expected += [f"maye/reflection_analysis/{k}" for k in analysis] + [
        f"maye/reflection_words/{w}" for w in words
    ]
    missing = [k for k in expected if k not in row]
    assert not missing, missing
    # a random model never stops within 12 tokens: every completion is clipped and penalised
    assert float(row["maye/response_length/clip_ratio"]) == 1.0 and float(row["rewards/no_eos/mean"]) == -1.0

    pred = tmp_path / "pred"
    assert (
        main(
            [
                *infer_args("geometry", tmp_path / "grpo", data, pred, max_new_tokens=8, max_pixels=3136),
                "--num-samples",
                "3",
                "--temperature",
                "1.0",
            ]
        )
        == 0
    )
    records = [json.loads(x) for x in (pred / "shard-00000.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(len(r["samples"]) == 3 for r in records)
    out, verdicts = tmp_path / "m.json", tmp_path / "v.jsonl"
    assert (
        main(
            [
                *scoring_args("eval", "geometry", data, pred),
                "--json-out",
                str(out),
                "--records-out",
                str(verdicts),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["num_items"] == 3
    assert len(verdicts.read_text().splitlines()) == 3
