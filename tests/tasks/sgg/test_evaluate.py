"""VG150 evaluation on a hand-built case, computed by hand in both modes, plus the prediction readers."""

from __future__ import annotations

import json

import pytest

from r1vision.tasks.base import RunContext
from r1vision.tasks.sgg.categories import load_vocabulary
from r1vision.tasks.sgg.data import image_size, sft_target
from r1vision.tasks.sgg.evaluate import evaluate_sgg, format_table
from r1vision.tasks.sgg.prediction_files import read_predictions
from r1vision.tasks.sgg.synth import make_config, synth_rows
from r1vision.tasks.sgg.task import SGGTask
from tests.helpers.sgg_rows import obj, rel, row

GT = [
    row(
        "a",
        [obj("man.1", [0, 0, 10, 10]), obj("horse.1", [20, 20, 40, 40]), obj("hat.1", [0, 0, 4, 4])],
        [rel("man.1", "riding", "horse.1"), rel("man.1", "wearing", "hat.1"), rel("hat.1", "on", "man.1")],
    ),
    row(
        "b",
        [obj("dog.1", [0, 0, 10, 10]), obj("cat.1", [10, 10, 20, 20])],
        [rel("dog.1", "near", "cat.1"), rel("dog.1", "with", "cat.1")],
    ),
    row(
        "c", [obj("car.1", [0, 0, 10, 10]), obj("tree.1", [20, 0, 30, 10])], [rel("car.1", "near", "tree.1")]
    ),
    row("d", [obj("cup.1", [0, 0, 5, 5]), obj("table.1", [0, 0, 50, 50])], [rel("cup.1", "on", "table.1")]),
    row(
        "e", [obj("kid.1", [0, 0, 5, 5]), obj("kite.1", [5, 5, 50, 50])], [rel("kid.1", "holding", "kite.1")]
    ),
]
# R1-SGG's gathered format: relation_tuples = [subject_id, subject_box, object_id, object_box, predicate].
PREDS = {
    "a": {
        "relation_tuples": [
            ["man.1", [0, 0, 10, 10], "horse.1", [20, 20, 40, 40], "riding"],  # hit in both modes
            # hat box [0, 0, 2, 3.5]: continuous IoU 7/16 < 0.5, +1-pixel IoU 13.5/25 >= 0.5 -> compat only
            ["man.1", [0, 0, 10, 10], "hat.1", [0, 0, 2, 3.5], "wearing"],
            ["hats.1", [0, 0, 4, 4], "man.1", [0, 0, 10, 10], "on"],  # plural: default only
        ]
    },
    "b": {"relation_tuples": [["dog.1", [0, 0, 10, 10], "cat.1", [10, 10, 20, 20], "near"]]},
    # "c" is absent from the predictions
    "d": {"relation_tuples": []},
    "e": {
        "boxes": [[0.1, 0.2, 0.3, 0.4]],
        "labels": [0],
        "scores": [0],
        "names": ["unknown"],
    },  # R1-SGG's failure stub
}
ZS = {("man", "wearing", "hat")}


def test_default_mode_by_hand():
    m = evaluate_sgg(GT, PREDS, zero_shot=ZS)
    # per-image recall: a 2/3 (riding, on), b 1/2, c/d/e 0 -> (2/3 + 1/2) / 5
    for k in (20, 50, 100):
        assert m[f"R@{k}"] == pytest.approx(7 / 30)
        assert m[f"ngR@{k}"] == pytest.approx(7 / 30)  # no pair carries a second predicate
        # predicates in GT: riding 1, wearing 0, on mean(1, 0), near mean(1, 0), with 0, holding 0
        assert m[f"mR@{k}"] == pytest.approx((1 + 0 + 0.5 + 0.5 + 0 + 0) / 6)
        assert m[f"zR@{k}"] == 0.0  # the only zero-shot GT relation (man wearing hat) is missed
    assert m["num_images"] == 5
    assert m["parse_failure_rate"] == pytest.approx(1 / 4)  # 4 records, "e" is a failure stub


def test_r1sgg_compat_mode_by_hand():
    m = evaluate_sgg(GT, PREDS, compat="r1sgg", zero_shot=ZS)
    # a 2/3 (riding, wearing), b 1/2, e 0: R1-SGG's placeholder for an unparsable answer carries a dummy
    # relation, so its evaluator scores the image (recall 0) instead of dropping it. c (absent) and d
    # (parsed, no relation survived) are not evaluated.
    for k in (20, 50, 100):
        assert m[f"R@{k}"] == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
        assert m[f"mR@{k}"] == pytest.approx(3 / 50)  # riding, wearing, near recalled; 50 predicates
        assert m[f"zR@{k}"] == 1.0
    # ngR: after the emitted "near", dog->cat's zero-score alternatives follow in vocabulary order; "with"
    # is the 49th of them (rank 50), so it is recalled at K=50 but not at K=20.
    assert m["ngR@20"] == pytest.approx((2 / 3 + 1 / 2) / 3)
    assert m["ngR@50"] == pytest.approx((2 / 3 + 1) / 3) and m["ngR@100"] == pytest.approx(5 / 9)
    assert m["ng-mR@50"] == pytest.approx(4 / 50)  # "with" joins riding, wearing, near
    assert m["num_images"] == 3 and m["parse_failure_rate"] == pytest.approx(1 / 4)


def test_one_to_one_matching_and_top_k_order():
    gt = [
        row(
            "x",
            [obj("man.1", [0, 0, 10, 10]), obj("man.2", [0, 0, 10, 10]), obj("horse.1", [20, 20, 40, 40])],
            [rel("man.1", "on", "horse.1"), rel("man.2", "on", "horse.1")],
        )
    ]
    one = {"x": {"relation_tuples": [["man.1", [0, 0, 10, 10], "horse.1", [20, 20, 40, 40], "on"]]}}
    assert evaluate_sgg(gt, one)["R@20"] == pytest.approx(0.5)  # one prediction recalls one relation
    assert evaluate_sgg(gt, one, compat="r1sgg")["R@20"] == 1.0  # ... or any number in compat mode
    late = {
        "x": {
            "relation_tuples": [["man", [50, 50, 60, 60], "horse.1", [20, 20, 40, 40], "on"]]
            + one["x"]["relation_tuples"]
        }
    }
    m = evaluate_sgg(gt, late, ks=(1, 2))
    assert m["R@1"] == 0.0 and m["R@2"] == pytest.approx(0.5)


def test_r1sgg_graph_field_is_decoded_without_relation_tuples(tmp_path):
    preds = load_vocabulary("vg150").predicates
    onehot = [0] * 151
    onehot[preds.index("riding") + 1] = 1
    entry = {
        "boxes": [[0, 0, 10, 10], [20, 20, 40, 40], [0, 0, 4, 4]],
        "labels": [79, 65, 61],
        "names": ["man.1", "horse.1", "hat.1"],
        "graph": {"all_node_pairs": [[0, 1], [0, 2]], "all_relation": [onehot, [0] * 151]},
    }
    path = tmp_path / "sgg_pred_results.json"
    path.write_text(json.dumps({"a": entry}))
    records = read_predictions(path)
    m = evaluate_sgg(GT[:1], records, compat="r1sgg")
    assert m["R@20"] == pytest.approx(1 / 3) and m["num_images"] == 1


def test_our_completions_end_to_end_on_synthetic_rows(tmp_path):
    rows = synth_rows(6, seed=5, split="val", cfg=make_config("default"))
    family = "qwen2_5_vl"
    lines = []
    for i, r in enumerate(rows):
        size = image_size(r["image"])
        text = sft_target(r["objects"], r["relationships"], size, family)
        lines.append({"index": i, "id": r["image_id"], "completion": text, "original_image_size": list(size)})
    lines[-1] = dict(lines[-1], completion="I cannot see anything")
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    gt = [{k: r[k] for k in ("image_id", "objects", "relationships")} for r in rows]
    m = evaluate_sgg(gt, str(path), model_family=family, vocab="synth")
    n_rel = sum(bool(json.loads(r["relationships"])) for r in rows)
    assert m["parse_failure_rate"] == pytest.approx(1 / 6)
    perfect = sum(bool(json.loads(r["relationships"])) for r in rows[:-1])
    # Synthetic pairs often carry several predicates ("above" + "near"); the graph-constrained R@K keeps
    # one per pair, so only the no-graph-constraint recall of a perfect answer is 1.
    assert m["ngR@100"] == pytest.approx(perfect / n_rel) and m["num_images"] == n_rel
    assert m["R@100"] < m["ngR@100"]
    compat = evaluate_sgg(gt, str(path), compat="r1sgg", model_family=family, vocab="synth")
    # the unparsable last answer counts with recall 0, as R1-SGG's placeholder does
    assert compat["R@100"] == pytest.approx(perfect / n_rel) and compat["num_images"] == n_rel
    with pytest.raises(ValueError, match="model_family"):
        evaluate_sgg(gt, str(path))
    # The task API: sizes come from the rows' images.
    opts, run = SGGTask.parse_options({"vocab": "synth"}), RunContext(family)
    res = SGGTask().evaluate(rows, [x["completion"] for x in lines], opts, run)
    assert res.metrics["ngR@100"] == pytest.approx(m["ngR@100"]) and len(res.records) == n_rel
    table = format_table(m)
    assert "mR" in table and "parse failures: 16.67%" in table


def test_viz_writes_a_png(tmp_path):
    import io

    from PIL import Image

    from r1vision.tasks.sgg.viz import render_sgg

    r = synth_rows(1, seed=2)[0]
    image = Image.open(io.BytesIO(r["image"]["bytes"]))
    target = sft_target(r["objects"], r["relationships"], image.size, "qwen2_vl")
    out = render_sgg(image, r["objects"], r["relationships"], target, tmp_path / "viz.png")
    assert Image.open(out).size[0] > 0
    assert render_sgg(image, r["objects"], r["relationships"], "garbage", tmp_path / "bad.png").exists()


def test_json_lines_fast_path_reads_what_datasets_reads(tmp_path):
    """The eval's JSON-lines reader (no `datasets`, one row at a time) yields load_rows' values, paths
    absolute; a column a line lacks is absent (read with .get) where load_rows fills it with None: a
    streaming reader cannot know the later lines' columns."""
    import json as _json

    from r1vision.tasks.loading import load_rows, locate, read_json_lines

    lines = [
        {"image_id": "a", "image": "imgs/a.jpg", "objects": "[]", "relationships": "[]", "extra": 1},
        {"image_id": "b", "image": str(tmp_path / "imgs" / "b.jpg"), "objects": "[]", "relationships": "[]"},
    ]
    path = tmp_path / "val.jsonl"
    path.write_text("".join(_json.dumps(r) + "\n" for r in lines) + "\n")
    fast = list(read_json_lines(locate(path, "val")))
    slow = list(load_rows(path, "val"))
    assert [{k: s[k] for k in f} for f, s in zip(fast, slow, strict=True)] == fast
    assert [set(s) - set(f) for f, s in zip(fast, slow, strict=True)] == [set(), {"extra"}]
    assert fast[0]["image"] == str((tmp_path / "imgs/a.jpg").resolve()) and fast[1].get("extra") is None
    assert list(read_json_lines(locate(tmp_path, "val"))) == fast  # a folder holding the file


def test_record_without_completion_is_a_failure_not_an_empty_graph():
    """An infer record whose completion was lost used to decode as an empty R1-SGG entry: scored 0 and
    counted as covered, with no parse failure."""
    preds = dict(PREDS)
    preds["c"] = {"index": 2, "image_id": "c"}  # an r1vision record without its completion
    with pytest.warns(UserWarning, match="1 prediction record\\(s\\) carry no completion"):
        m = evaluate_sgg(GT, preds, zero_shot=ZS)
    assert m["records_without_completion"] == 1.0
    assert m["coverage"] == pytest.approx(4 / 5)  # covered before: a, b, d, e; c's record answers nothing
    assert m["parse_failure_rate"] == pytest.approx(2 / 5)  # e's stub and c's lost completion
    assert m["R@50"] == pytest.approx(7 / 30)
