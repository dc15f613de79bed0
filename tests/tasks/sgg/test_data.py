"""SGG data: synthetic generator (determinism, schema, geometry), loaders, validation, trainer rows."""

from __future__ import annotations

import io
import json
import logging

import datasets
import pytest
from PIL import Image

from r1vision.tasks.sgg.categories import load_vocabulary
from r1vision.tasks.sgg.data import load_raw, to_trainer_format, validate_row, validate_rows
from r1vision.tasks.sgg.parse import parse_scene_graph
from r1vision.tasks.sgg.synth import make_config, synth_rows, synth_sgg
from r1vision.tasks.sgg.task import SGGTask
from r1vision.vision.budget import PixelBudget
from tests.helpers.tasks import run_context, task_rows

SCHEMA = ["image_id", "image", "prompt_open", "prompt_close", "objects", "relationships"]


def test_synth_is_deterministic_and_seed_dependent():
    a, b = synth_rows(4, seed=7), synth_rows(4, seed=7)
    assert a == b
    c = synth_rows(4, seed=8)
    assert [r["objects"] for r in a] != [r["objects"] for r in c]
    assert synth_rows(2, seed=7, split="val")[0]["objects"] != a[0]["objects"]


def test_synth_rows_follow_schema_and_geometry():
    for r in synth_rows(12, seed=1):
        assert sorted(r) == sorted(SCHEMA)
        validate_row(r)
        image = Image.open(io.BytesIO(r["image"]["bytes"]))
        w, h = image.size
        objects = {o["id"]: o["bbox"] for o in json.loads(r["objects"])}
        for x1, y1, x2, y2 in objects.values():
            assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
        for rel in json.loads(r["relationships"]):
            s, o = objects[rel["subject"]], objects[rel["object"]]
            if rel["predicate"] == "left of":
                assert s[2] <= o[0]
            if rel["predicate"] == "above":
                assert s[3] <= o[1]
            if rel["predicate"] == "inside":
                assert o[0] <= s[0] and o[1] <= s[1] and s[2] <= o[2] and s[3] <= o[3]


def test_demo_preset_fits_a_tiny_model():
    cfg = make_config("demo")
    seen_counts = set()
    for r in synth_rows(40, seed=0, cfg=cfg):
        assert Image.open(io.BytesIO(r["image"]["bytes"])).size == (84, 84)
        objs = json.loads(r["objects"])
        seen_counts.add(len(objs))
        for o in objs:
            x1, y1, x2, y2 = o["bbox"]
            assert x2 - x1 >= 0.85 * 28 - 1 and y2 - y1 >= 0.85 * 28 - 1  # fills >= 85% of its 28-px cell
            assert x1 // 28 == (x2 - 1) // 28 and y1 // 28 == (y2 - 1) // 28  # stays in one cell
            assert o["id"].split(".")[0] in cfg.object_names()
        assert {x["predicate"] for x in json.loads(r["relationships"])} <= {"left of", "above"}
    assert seen_counts == {1, 2, 3}
    with pytest.raises(ValueError, match="unknown scene option"):
        make_config("demo", wobble=3)


def _write_all_formats(tmp_path):
    out = synth_sgg(tmp_path / "pq", 5, seed=2, split="val", preset="demo")
    rows = synth_rows(5, seed=2, split="val", cfg=make_config("demo"))
    jdir = tmp_path / "js"
    (jdir / "images").mkdir(parents=True)
    with open(jdir / "val.jsonl", "w") as f:
        for r in rows:
            name = f"images/{r['image_id']}.png"
            (jdir / name).write_bytes(r["image"]["bytes"])
            f.write(json.dumps(dict(r, image=name)) + "\n")
    ds, _ = load_raw(out, "val")
    disk = tmp_path / "disk"
    datasets.DatasetDict({"validation": ds}).save_to_disk(str(disk))
    return out, jdir, disk, rows


def test_same_rows_from_parquet_jsonl_and_save_to_disk(tmp_path, caplog):
    pq, jdir, disk, rows = _write_all_formats(tmp_path)
    expected = [(r["image_id"], r["objects"], r["relationships"]) for r in rows]
    for source in (pq, pq / "val.parquet", jdir, jdir / "val.jsonl", disk):
        ds, root = load_raw(source, "val")
        validate_rows(ds)
        assert [(r["image_id"], r["objects"], r["relationships"]) for r in ds] == expected, source
    # A folder with one split serves any requested split, with a notice ...
    with caplog.at_level(logging.WARNING, logger="r1vision.tasks.loading"):
        ds, _ = load_raw(pq, "train")
    assert len(ds) == 5 and "holds one split (validation); using it for split 'train'" in caplog.text
    # ... but with several splits a missing one is an error naming what is there.
    synth_sgg(pq, 2, seed=3, split="train", preset="demo")
    with pytest.raises(ValueError, match="no files for split 'test'.*splits \\['train', 'validation'\\]"):
        load_raw(pq, "test")
    # Relative image paths of a jsonl are made absolute; the SFT target reads the size from the file.
    ds, root = load_raw(jdir, "val")
    tr = to_trainer_format(ds, root, model_family="qwen2_vl")
    assert tr[0]["images"] == [str((jdir / f"images/{rows[0]['image_id']}.png").resolve())]
    assert parse_scene_graph(tr[0]["completion"][0]["content"][0]["text"]).ok


def test_hub_source_with_a_single_split(monkeypatch):
    rows = synth_rows(2, seed=0)
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list([{k: r[k] for k in SCHEMA if k != "image"} for r in rows])}
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda name, *a, **k: dd)
    ds, root = load_raw("JosephZ/vg150_val_sgg_prompt", "val")  # only a "train" split on the Hub
    assert root is None and len(ds) == 2


def test_validation_names_row_and_field():
    good = synth_rows(1, seed=0)[0]
    cases = {
        "objects": dict(good, objects="[{"),
        "relationships": dict(
            good, relationships=json.dumps([{"subject": "nope.1", "predicate": "on", "object": "x"}])
        ),
    }
    for field, bad in cases.items():
        with pytest.raises(ValueError, match=rf"row 3 .*field '{field}'"):
            validate_row(bad, 3)
    inverted = dict(good, objects=json.dumps([{"id": "a.1", "bbox": [10, 0, 5, 5]}]), relationships="[]")
    with pytest.raises(ValueError, match="bbox"):
        validate_row(inverted, 0)
    dup = dict(good, objects=json.dumps([{"id": "a.1", "bbox": [0, 0, 5, 5]}] * 2), relationships="[]")
    with pytest.raises(ValueError, match="duplicate id"):
        validate_row(dup, 0)
    with pytest.raises(ValueError, match="field 'image_id': missing"):
        validate_row({k: v for k, v in good.items() if k != "image_id"}, 0)


def test_task_load_builds_trainer_rows(tmp_path):
    out = synth_sgg(tmp_path / "s", 3, seed=4, split="train")
    task = SGGTask()
    opts, run = (
        task.parse_options({"prompt": "closed", "think": True}),
        run_context("qwen2_5_vl", 256 * 28 * 28),
    )
    ds = task.load(str(out), "train", opts, run)
    assert set(ds.column_names) == {"prompt", "images", "completion", "image_id", "objects", "relationships"}
    r = ds[0]
    user = r["prompt"][-1]["content"]
    assert user[0] == {"type": "image"} and "<think>" in user[1]["text"] and "left of" in user[1]["text"]
    assert isinstance(r["images"][0], Image.Image)
    # Qwen2.5-VL targets are in pixels of the resized image.
    w, h = PixelBudget.for_family("qwen2_5_vl", max_pixels=256 * 28 * 28).resized_size(*r["images"][0].size)
    graph = parse_scene_graph(r["completion"][0]["content"][0]["text"]).graph
    gt = json.loads(r["objects"])
    assert [o.id for o in graph.objects] == [o["id"] for o in gt]
    for o, g in zip(graph.objects, gt, strict=True):
        sx, sy = w / r["images"][0].size[0], h / r["images"][0].size[1]
        assert o.box == tuple(float(round(v * s)) for v, s in zip(g["bbox"], (sx, sy, sx, sy), strict=True))
    assert task.sft_target(r, opts, run) == r["completion"][0]["content"][0]["text"]
    open_rows = task_rows("sgg", out, "train")  # no family: generic prompt, no SFT target
    assert "completion" not in open_rows.column_names
    assert len(load_vocabulary("psg").predicates) == 56 and len(load_vocabulary("vg150").objects) == 150


def test_sgg_loader_names_row_of_unreadable_image(tmp_path):

    Image.new("RGB", (64, 48), "white").save(tmp_path / "ok.png")
    (tmp_path / "bad.png").write_bytes(b"not an image at all")
    objects = json.dumps([{"id": "circle.1", "bbox": [1, 1, 10, 10]}])
    with open(tmp_path / "train.jsonl", "w") as f:
        for i, name in enumerate(["ok.png", "bad.png"]):
            f.write(
                json.dumps({"image_id": f"img{i}", "image": name, "objects": objects, "relationships": "[]"})
            )
            f.write("\n")
    with pytest.raises(Exception, match=r"row 1 \(image_id='img1'\): field 'image': cannot read"):
        task_rows("sgg", tmp_path, "train", family="qwen2_vl", with_completion=True)


def test_r1sgg_prompts_are_the_ones_r1sgg_trains_with(tmp_path):
    """``prompt: r1sgg`` evaluates R1-SGG's checkpoints on the prompts they were trained with: its constant
    PROMPT_SG for the open vocabulary (it never reads the dataset's prompt_open), the row's prompt_close for
    the closed one."""
    from r1vision.tasks.sgg.prompts import R1_THINK_SYSTEM, R1SGG_PLAIN_SYSTEM, R1SGG_PROMPT_SG, r1sgg_prompt

    out = synth_sgg(tmp_path / "s", 2, seed=1, split="train")
    raw, _ = load_raw(str(out), "train")
    rows = task_rows("sgg", out, "train", family="qwen2_vl", prompt="r1sgg")
    closed = task_rows("sgg", out, "train", family="qwen2_vl", prompt="r1sgg_closed", think=True)
    system, user = rows[0]["prompt"][0], rows[0]["prompt"][1]
    assert system["content"][0]["text"] == R1SGG_PLAIN_SYSTEM
    assert closed[0]["prompt"][0]["content"][0]["text"] == R1_THINK_SYSTEM
    assert user["content"][1]["text"] != closed[0]["prompt"][1]["content"][1]["text"]
    assert user["content"][1]["text"] == R1SGG_PROMPT_SG
    assert R1SGG_PROMPT_SG.startswith(
        "Generate a structured scene graph for an image using the following format:"
    )
    assert R1SGG_PROMPT_SG.endswith("Now, generate the complete scene graph for the provided image:\n")
    assert closed[0]["prompt"][1]["content"][1]["text"] == r1sgg_prompt(raw[0]["prompt_close"])
    text = 'Generate the graph of this image of size (640 x 480) as <answer>{"objects": []}</answer>'
    assert r1sgg_prompt(text) == 'Generate the graph of this image as ```json{"objects": []}```'
