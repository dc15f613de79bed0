"""Geometry data: synthetic generator, MAYE jsonl loading, column mapping, bad rows, the task API."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from PIL import Image

from r1vision.tasks.geometry import answers_match
from r1vision.tasks.geometry.data import (
    DEFAULT_INSTRUCTION,
    GeometryDataError,
    build_prompt,
    load_geometry_dataset,
    split_file,
)
from r1vision.tasks.geometry.evaluate import evaluate_geometry
from r1vision.tasks.geometry.synth import KINDS, latex_fraction, latex_surd, surd, synth_geometry
from r1vision.tasks.geometry.task import GeometryTask
from tests.helpers.tasks import run_context


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_synth_is_deterministic_and_in_maye_layout(tmp_path: Path) -> None:
    a = synth_geometry(tmp_path / "a", 8, seed=3)
    b = synth_geometry(tmp_path / "b", 8, seed=3)
    c = synth_geometry(tmp_path / "c", 8, seed=4)
    assert a.name == "geometry_synth_rl_v0.jsonl"
    assert _digest(a.parent) == _digest(b.parent) != _digest(c.parent)
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    assert len(rows) == 8 and {r["kind"] for r in rows[:6]} == set(KINDS)
    for row in rows:
        assert {"question", "answer", "solution", "id", "image"} <= set(row)
        assert row["question"].startswith("<image>")
        assert (a.parent / row["image"]).is_file() and not Path(row["image"]).is_absolute()
        assert Image.open(a.parent / row["image"]).size == (336, 336)
        # the solution's boxed answer is the answer, and the verifier agrees
        assert row["solution"].endswith(f"\\boxed{{{row['answer']}}}")
        assert answers_match(row["solution"], row["answer"], use_math_verify=False)
    val = synth_geometry(tmp_path / "a", 3, seed=3, split="validation")
    assert val.name == "geometry_synth_validation_v0.jsonl"


def test_exact_answer_helpers() -> None:
    assert surd(72) == (6, 2) and surd(49) == (7, 1) and surd(30) == (1, 30)
    assert [latex_surd(n) for n in (25, 12, 7)] == ["5", "2\\sqrt{3}", "\\sqrt{7}"]
    from fractions import Fraction

    assert (
        latex_fraction(Fraction(45, 2)) == "\\frac{45}{2}"
        and latex_fraction(Fraction(-3, 4)) == "-\\frac{3}{4}"
    )


def test_load_jsonl_with_relative_images(tmp_path: Path) -> None:
    path = synth_geometry(tmp_path, 5, seed=0)
    ds = load_geometry_dataset(path)
    assert len(ds) == 5
    row = ds[0]
    assert set(row) >= {"prompt", "images", "answer", "solution", "id", "completion", "question"}
    assert Path(row["images"][0]).is_absolute() and Path(row["images"][0]).is_file()
    user = row["prompt"][-1]
    assert user["role"] == "user" and user["content"][0]["type"] == "image"
    assert user["content"][1]["text"].endswith(DEFAULT_INSTRUCTION)
    assert row["completion"][0]["content"][0]["text"] == row["solution"]
    # a folder resolves MAYE's split names: train -> *_rl_*
    assert load_geometry_dataset(tmp_path, split="train")["id"] == ds["id"]
    # one split in the folder serves any request (with a notice); with two, a missing one is an error
    assert load_geometry_dataset(tmp_path, split="test")["id"] == ds["id"]
    synth_geometry(tmp_path, 2, seed=0, split="val")
    assert len(load_geometry_dataset(tmp_path, split="val")) == 2  # synth --split val is found by val
    with pytest.raises(GeometryDataError, match="no files for split 'test'"):
        load_geometry_dataset(tmp_path, split="test")


def test_image_placeholder_becomes_image_slot_in_place() -> None:
    prompt = build_prompt("In the figure <image> find x. Compare <image>.", 2, instruction="Box it.")
    assert prompt == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "In the figure"},
                {"type": "image"},
                {"type": "text", "text": "find x. Compare"},
                {"type": "image"},
                {"type": "text", "text": ".\nBox it."},
            ],
        }
    ]
    no_placeholder = build_prompt("Find x.", 1, instruction=None, system_prompt="Be brief.")
    assert no_placeholder[0]["role"] == "system"
    assert no_placeholder[1]["content"] == [{"type": "image"}, {"type": "text", "text": "Find x."}]


def test_split_file_resolution(tmp_path: Path) -> None:
    for name in ("geometry3k_rl_v0", "geometry3k_validation_v0", "geometry3k_test_v0"):
        (tmp_path / f"{name}.jsonl").write_text("")
    assert split_file(tmp_path, "train").name == "geometry3k_rl_v0.jsonl"
    assert split_file(tmp_path, "validation").name == "geometry3k_validation_v0.jsonl"
    (tmp_path / "mm_math_test_v1.jsonl").write_text("")
    with pytest.raises(GeometryDataError, match="several files match split 'test'"):
        split_file(tmp_path, "test")


def test_column_mapping_and_pil_images() -> None:
    image = Image.new("RGB", (40, 30), "white")
    rows = [{"problem": "<image>Find x.", "images": [image], "final": 7, "uid": 1}]
    ds = load_geometry_dataset(rows, column_mapping={"problem": "question", "final": "answer", "uid": "id"})
    row = ds[0]
    assert row["answer"] == "7" and row["solution"] == "\\boxed{7}" and row["id"] == "1"
    assert row["images"][0].size == (40, 30)


def test_hub_source_goes_through_shared_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name, split=None, **kwargs):
        calls.append((name, split))
        if split != "rl":
            raise ValueError(f"Unknown split {split!r}")
        return datasets.Dataset.from_list([{"question": "Find x.", "answer": "3", "solution": "\\boxed{3}"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_geometry_dataset("someone/maye-like", split="train", instruction=None)
    assert calls == [("someone/maye-like", "train"), ("someone/maye-like", "rl")]
    assert ds[0]["prompt"][0]["content"] == [{"type": "text", "text": "Find x."}]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"answer": "3", "image": "a.png"}, "field 'question' must be a non-empty string"),
        ({"question": "<image>x", "image": "a.png"}, "needs a non-empty 'answer' or 'solution'"),
        (
            {"question": "<image>x", "answer": ["3"], "image": "a.png"},
            "field 'answer' must be a string or number",
        ),
        (
            {"question": "<image>x", "answer": "3", "image": "missing.png"},
            "field 'image': image file not found",
        ),
        ({"question": "<image>x", "answer": "3"}, "has <image> but the row has no image"),
        ({"question": "<image><image>x", "answer": "3", "image": "a.png"}, "2 <image> placeholder.*1 image"),
        ({"question": "<image>x", "answer": "3", "image": 5}, "field 'image': expected a path"),
        ({"question": "x", "solution": "We reason here\nand never conclude"}, "holds no extractable answer"),
        ({"question": "x", "answer": "3", "choices": "A"}, "field 'choices' must be a list"),
    ],
)
def test_bad_rows_name_row_and_field(tmp_path: Path, row: dict, message: str) -> None:
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    good = {"question": "<image>ok", "answer": "1", "image": "a.png", "id": "good"}
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(GeometryDataError, match=message) as err:
        load_geometry_dataset(path)
    assert "row 1" in str(err.value) and str(path) in str(err.value)


def test_bad_json_line_names_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"question": "q", "answer": "1"}\n{broken\n')
    with pytest.raises(GeometryDataError, match=r"x\.jsonl:2: not valid JSON"):
        load_geometry_dataset(path)


def test_task_api_end_to_end(tmp_path: Path) -> None:
    task = GeometryTask()
    path = task.synth(tmp_path, 6, seed=1, split="test")
    opts, run = task.parse_options(), run_context("qwen2_5_vl", 100_000, eos=(2,))
    ds = task.load(str(path), "test", opts, run)
    rows = [dict(r) for r in ds]
    assert task.sft_target(rows[0], opts, run) == rows[0]["solution"]
    completions = [
        [f"Wait, let me check. \\boxed{{{rows[0]['answer']}}}", "\\boxed{-1}"],
        "\\boxed{-1}",
        *[r["solution"] for r in rows[2:]],
    ]
    result = evaluate_geometry(rows, completions, lengths=[[10, 20], 30, 5, 5, 5, 40], max_length=40)
    assert task.evaluate(rows, completions, opts, run).metrics["accuracy"] == result.metrics["accuracy"]
    assert result.metrics["accuracy"] == pytest.approx(5 / 6)  # row 0 passes at k=2, row 1 fails
    assert result.metrics["mean_sample_accuracy"] == pytest.approx(5 / 7)
    assert result.metrics["response_length/clip_ratio"] == pytest.approx(1 / 7)
    assert result.metrics["reflection_analysis/reflection_ratio"] == pytest.approx(1 / 7)
    assert result.metrics["reflection_words/wait"] == 1
    assert [r["correct"] for r in result.records] == [True, False, True, True, True, True]
    assert result.records[0]["verdicts"] == [True, False] and result.records[1]["predictions"] == ["-1"]
    names = [s.name for s in task.rewards(opts, run)]
    assert names == ["accuracy", "format", "language", "no_eos"]


def test_one_options_object_serves_load_and_rewards(tmp_path: Path) -> None:
    task = GeometryTask()
    path = task.synth(tmp_path, 2, seed=0)
    opts, run = task.parse_options({"format_weight": 0.5, "instruction": None}), run_context("qwen2_vl", 4096)
    ds = task.load(str(path), "train", opts, run)
    assert ds[0]["prompt"][0]["content"][-1]["text"] == ds[0]["question"].replace("<image>", "")
    specs = task.rewards(opts, run)
    assert [(s.name, s.weight) for s in specs][:2] == [("accuracy", 1.0), ("format", 0.5)]
