"""The ``motion`` (video) task: Video-R1's schema loads, rewards score option letters, eval runs on
predictions, and bad rows fail before training."""

from __future__ import annotations

import json

import pytest

from r1vision.tasks.base import RunContext
from r1vision.tasks.loading import DatasetLoadError
from r1vision.tasks.motion.data import load_motion_dataset
from r1vision.tasks.motion.rewards import motion_accuracy, motion_format
from r1vision.tasks.motion.task import MotionTask
from r1vision.trainer.validation import DatasetValidationError, validate_dataset


def _c(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def test_rows_load_with_absolute_video_paths(motion_dir):
    rows = load_motion_dataset(motion_dir, "train")
    first = rows[0]
    assert first["video"].startswith(str(motion_dir)) and first["video"].endswith(".mp4")
    assert first["prompt"][0]["content"][0] == {"type": "video"}
    assert "Options:\nA. " in first["prompt"][0]["content"][1]["text"]
    assert first["answer"] in "ABCD"
    assert load_motion_dataset(motion_dir, "test")[0]["video"].endswith("test_00000")  # a frame folder


def test_rewards_score_the_option_letter():
    answers = ["B", "B", "b", "C", "B"]
    completions = [_c("<answer>B</answer>"), _c("I think <answer> b </answer>"), _c("<answer>B</answer>"),
                   _c("<answer>B</answer>"), _c("B")]  # fmt: skip
    assert motion_accuracy([None] * 5, completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert motion_format([None] * 5, completions) == [1.0, 0.5, 1.0, 1.0, 0.0]
    hostile = [_c("<answer>" * 10_000), _c("\x00" * 50_000), _c("<answer>" + "A" * 100 + "</answer>")]
    assert motion_accuracy([None] * 3, hostile, answer=["A"] * 3) == [0.0, 0.0, 0.0]
    assert motion_accuracy([None], [_c("<answer>A</answer>")]) == [0.0]  # no answer column: 0, no raise


def test_eval_scores_prediction_files(motion_dir, tmp_path):
    task = MotionTask()
    rows = task.load(motion_dir, "test", task.parse_options(), RunContext())
    preds = tmp_path / "preds.jsonl"
    with preds.open("w") as f:
        for i, row in enumerate(rows):
            letter = row["answer"] if i % 2 == 0 else ("A" if row["answer"] != "A" else "B")
            f.write(json.dumps({"index": i, "completion": f"<answer>{letter}</answer>"}) + "\n")
    result = task.evaluate_files(str(motion_dir), str(preds), "test", task.parse_options(), RunContext())
    assert result.metrics["reward/accuracy"] == pytest.approx(0.5)
    assert result.metrics["reward/format"] == pytest.approx(1.0)
    assert result.metrics["coverage"] == 1.0


def test_bad_rows_fail_before_training(motion_dir, tmp_path):
    from datasets import Dataset

    rows = load_motion_dataset(motion_dir, "train")
    gone = rows.map(lambda r: {"video": r["video"] + ".missing"})
    with pytest.raises(
        DatasetValidationError, match=r"row 0 problem_id=0: video 0 .*missing\): file not found"
    ):
        validate_dataset(gone)
    (tmp_path / "train.jsonl").write_text(
        json.dumps(
            {"problem": "?", "options": ["A. x"], "solution": "B", "path": "v.mp4", "data_type": "video"}
        )
        + "\n"
    )
    with pytest.raises(DatasetLoadError, match="row 0: solution 'B' holds no <answer>LETTER</answer>"):
        load_motion_dataset(tmp_path, "train")
    assert isinstance(rows, Dataset)


def test_a_hub_video_feature_loads_undecoded_and_trains_its_frames(motion_dir, tmp_path):
    """datasets decodes Video columns with torchcodec (no CPU build here): rows get {path, bytes} instead."""
    import datasets

    from r1vision.tasks.loading import load_rows
    from r1vision.vision.video import VideoBudget, load_clip

    rows = [json.loads(line) for line in (motion_dir / "train.jsonl").read_text().splitlines()][:2]
    data = datasets.Dataset.from_dict(
        {"video": [str(motion_dir / r["path"]) for r in rows], "problem": [r["problem"] for r in rows]}
    ).cast_column("video", datasets.Video())
    data.save_to_disk(str(tmp_path / "hub_like"))
    loaded = load_rows(tmp_path / "hub_like", "train")
    assert loaded.features["video"].decode is False
    value = loaded[0]["video"]
    assert value["path"].endswith(".mp4")
    clip = load_clip(value, VideoBudget(max_frame_pixels=784, min_frame_pixels=784))
    assert clip.shape == (4, 28, 28, 3) and clip.total_num_frames == 8
