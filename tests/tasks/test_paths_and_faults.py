"""Faults a cluster user meets: an ``images/`` folder that is a symlink into a common store (accepted: the
check is on the path as written), a settings file cut by a kill (rewritten, and written atomically), and
an OCR target long enough to stall a reward (its cost is bounded)."""

from __future__ import annotations

import json
import os
import time

import pytest

from r1vision.tasks.loading import DatasetLoadError, _absolute_path


def test_a_symlinked_image_folder_inside_the_dataset_is_accepted(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "a.png").write_bytes(b"png")
    data = tmp_path / "data"
    data.mkdir()
    (data / "images").symlink_to(store, target_is_directory=True)
    assert _absolute_path("images/a.png", data) == str(data / "images" / "a.png")
    with pytest.raises(DatasetLoadError, match="row 3: image path '../store/a.png' leads outside"):
        _absolute_path("../store/a.png", data, 3)  # written to leave the folder: refused


def test_one_rule_for_data_paths_in_every_task_with_an_opt_in(tmp_path, monkeypatch, capsys):
    """A path written in a row that leaves the dataset folder, relative or absolute, is refused naming the row
    in every task's loader (the generic one, geometry's jsonl reader, SVG's, SGG's size reader); the
    ``--allow_external_paths`` flag of any command lifts the rule, through the environment."""
    from PIL import Image

    from r1vision.cli import _global_flags
    from r1vision.tasks.geometry.data import load_geometry_dataset
    from r1vision.tasks.loading import EXTERNAL_PATHS_ENV
    from r1vision.tasks.sgg.data import image_size

    outside = tmp_path / "elsewhere.png"
    Image.new("RGB", (6, 4)).save(outside)
    data = tmp_path / "data"
    data.mkdir()
    Image.new("RGB", (6, 4)).save(data / "in.png")
    monkeypatch.delenv(EXTERNAL_PATHS_ENV, raising=False)
    assert _absolute_path(str(data / "in.png"), data, 0) == str(data / "in.png")  # absolute, inside: fine
    with pytest.raises(DatasetLoadError, match=f"row 2: image absolute path '{outside}' leads outside"):
        _absolute_path(str(outside), data, 2)
    row = {"question": "x?", "answer": "1", "image": "../elsewhere.png"}
    (data / "geo.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetLoadError, match="leads outside the dataset folder"):
        load_geometry_dataset(data / "geo.jsonl")
    with pytest.raises(DatasetLoadError, match="leads outside"):
        image_size(str(outside), data)

    assert _global_flags(["--task", "sgg", "--allow_external_paths", "--seed", "1"]) == [
        "--task",
        "sgg",
        "--seed",
        "1",
    ]
    assert os.environ[EXTERNAL_PATHS_ENV] == "1"
    assert _absolute_path(str(outside), data, 2) == str(outside)
    assert load_geometry_dataset(data / "geo.jsonl")[0]["images"] == [str(outside)]
    assert image_size(str(outside), data) == (6, 4)
    assert _global_flags(["--allow_external_paths=false"]) == [] and os.environ[EXTERNAL_PATHS_ENV] == "0"
    with pytest.raises(DatasetLoadError):
        _absolute_path(str(outside), data, 2)


def test_a_damaged_settings_file_is_rewritten_atomically(tmp_path):
    from r1vision.runners.infer import SETTINGS_FILE, check_or_write_settings

    (tmp_path / SETTINGS_FILE).write_text('{"task": "co')  # cut mid-write by a kill or a full disk
    check_or_write_settings(tmp_path, {"task": "color"})
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == {"task": "color"}
    assert not list(tmp_path.glob("*.tmp"))


def test_the_ocr_reward_bounds_its_cost_on_any_target():
    from r1vision.diffusion.rewards.ocr import ocr_score

    target, read = "ab" * 25_000, "ba" * 1_000  # 50,000 quoted characters took 13.6 s per image
    start = time.process_time()
    value = ocr_score(read, target, mode="strict")
    assert 0.0 <= value <= 1.0 and time.process_time() - start < 2.0
