"""One dataset loader for every task: split aliases, single-split sources, Hub layout, id checks in eval."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import pytest

from r1vision.tasks import get_task
from r1vision.tasks.base import RunContext
from r1vision.tasks.loading import DatasetLoadError, canonical_split, load_rows, split_names
from r1vision.vision.records import PredictionMismatchError, RecordWriter
from tests.helpers.paths import RECIPE_FILES

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


def _rows(tag: str, n: int = 3) -> list[dict]:
    return [{"id": f"{tag}-{i}", "question": "q", "answer": "red"} for i in range(n)]


def test_one_alias_table() -> None:
    assert split_names("val") == ("val", "validation", "valid", "dev")
    assert canonical_split("rl") == "train" and canonical_split("dev") == "validation"
    assert split_names("holdout") == ("holdout",)


def test_hub_layout_folder_serves_any_split_with_a_notice(tmp_path: Path, caplog) -> None:
    """R1-SGG's validation set keeps its rows in ``data/train-00000-of-00001.parquet``."""
    (tmp_path / "data").mkdir()
    datasets.Dataset.from_list(_rows("val")).to_parquet(
        str(tmp_path / "data" / "train-00000-of-00001.parquet")
    )
    with caplog.at_level(logging.WARNING, logger="r1vision.tasks.loading"):
        ds = load_rows(tmp_path, "test")
    assert ds["id"] == ["val-0", "val-1", "val-2"]
    assert "holds one split (train); using it for split 'test'" in caplog.text


def test_shards_combine_and_aliases_match(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    for k in range(2):
        datasets.Dataset.from_list(_rows(f"t{k}", 2)).to_parquet(
            str(tmp_path / "data" / f"train-0000{k}-of-00002.parquet")
        )
    datasets.Dataset.from_list(_rows("v")).to_parquet(
        str(tmp_path / "data" / "validation-00000-of-00001.parquet")
    )
    assert len(load_rows(tmp_path, "train")) == 4
    assert load_rows(tmp_path, "val")["id"] == ["v-0", "v-1", "v-2"]
    with pytest.raises(DatasetLoadError, match=r"no files for split 'test'.*\['train', 'validation'\]"):
        load_rows(tmp_path, "test")


def test_single_file_names_the_split_it_is_used_for(tmp_path: Path, caplog) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows("t")))
    with caplog.at_level(logging.WARNING, logger="r1vision.tasks.loading"):
        assert len(load_rows(path, "test")) == 3
    assert "single file (split 'train'); using it for split 'test'" in caplog.text


def test_save_to_disk_with_one_split_and_missing_path(tmp_path: Path) -> None:
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows("t"))}).save_to_disk(str(tmp_path / "d"))
    assert len(load_rows(tmp_path / "d", "validation")) == 3
    with pytest.raises(DatasetLoadError, match="does not exist"):
        load_rows(tmp_path / "nope", "train")


def test_eval_refuses_predictions_of_another_split(tmp_path: Path) -> None:
    """``eval --split validation`` on test predictions used to match rows by index silently."""
    from r1vision.tasks.color.synth import synth_color

    synth_color(tmp_path / "d", 3, seed=0, split="test")
    synth_color(tmp_path / "d", 3, seed=1, split="validation")
    task = get_task("color")
    opts, run = task.parse_options(), RunContext()
    test_rows = task.load(str(tmp_path / "d"), "test", opts, run)
    writer = RecordWriter(tmp_path / "pred")
    for i in range(3):
        writer.write({"index": i, "id": test_rows[i]["id"], "completion": "<answer>red</answer>"})
    ok = task.evaluate_files(str(tmp_path / "d"), str(tmp_path / "pred"), "test", opts, run)
    assert ok.metrics["num_items"] == 3
    with pytest.raises(
        PredictionMismatchError, match="index 0 answers row id 'color-test-0'.*color-validation-0"
    ):
        task.evaluate_files(str(tmp_path / "d"), str(tmp_path / "pred"), "validation", opts, run)


def test_eval_sgg_on_r1sgg_validation_layout(tmp_path: Path, capsys) -> None:
    """``r1vision eval sgg --gt <folder>`` on R1-SGG's val layout (rows in ``data/train-*.parquet``)."""
    from r1vision.cli import main
    from r1vision.tasks.sgg.synth import make_config, synth_rows

    rows = synth_rows(3, seed=0, split="val", cfg=make_config("demo"))
    (tmp_path / "gt" / "data").mkdir(parents=True)
    datasets.Dataset.from_list([{k: v for k, v in r.items() if k != "image"} for r in rows]).to_parquet(
        str(tmp_path / "gt" / "data" / "train-00000-of-00001.parquet")
    )
    writer = RecordWriter(tmp_path / "pred")
    for i, r in enumerate(rows):
        writer.write(
            {
                "index": i,
                "image_id": r["image_id"],
                "completion": "no graph",
                "model_family": "qwen2_vl",
                "original_image_size": [84, 84],
                "image_size": [84, 84],
            }
        )
    code = main(
        [
            "eval",
            "--task",
            "sgg",
            "--dataset",
            str(tmp_path / "gt"),
            "--pred",
            str(tmp_path / "pred"),
            "--split",
            "test",
        ]
    )
    assert code == 0
    assert "num_images" in capsys.readouterr().out


def test_empty_dataset_is_a_clear_error():
    import datasets

    from r1vision.trainer.validation import DatasetValidationError, validate_dataset

    empty = datasets.Dataset.from_dict({"prompt": [], "images": []})
    with pytest.raises(DatasetValidationError, match="no rows"):
        validate_dataset(empty)
