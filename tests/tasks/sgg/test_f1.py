"""F1 rewards of scene graphs: hand-computed values, the 'list everything' exploit, hostile input."""

from __future__ import annotations

import json

import pytest

from r1vision.tasks.sgg.f1 import f1_rewards

# 100 x 200 image; in the 0-1000 frame man = [0, 0, 500, 500], horse = [500, 500, 1000, 1000].
GT_OBJECTS = json.dumps(
    [{"id": "man.1", "bbox": [0, 0, 50, 100]}, {"id": "horse.1", "bbox": [50, 100, 100, 200]}]
)
GT_RELS = json.dumps([{"subject": "man.1", "predicate": "riding", "object": "horse.1"}])
COLUMNS = {"objects": [GT_OBJECTS], "relationships": [GT_RELS], "original_image_sizes": [[[100, 200]]]}
MAN, HORSE = ("man.1", [0, 0, 500, 500]), ("horse.1", [500, 500, 1000, 1000])


def answer(objects, relations=()):
    payload = {
        "objects": [{"id": i, "bbox": b} for i, b in objects],
        "relationships": [{"subject": s, "predicate": p, "object": o} for s, p, o in relations],
    }
    return "<answer>" + json.dumps(payload) + "</answer>"


def scores(text, columns=COLUMNS, **kwargs):
    return {s.name: s.func([None], [text], **columns)[0] for s in f1_rewards("qwen2_vl", **kwargs)}


def test_perfect_graph_scores_one_everywhere():
    assert scores(answer([MAN, HORSE], [("man.1", "riding", "horse.1")])) == {
        "format": 1.0, "node_f1": 1.0, "edge_f1": 1.0,
    }  # fmt: skip


def test_extra_relations_cost_precision():
    # 1 correct of 3 emitted, 1 GT relation: F1 = 2*1 / (3 + 1) = 0.5. Recall would still be 1.
    rels = [("man.1", "riding", "horse.1"), ("horse.1", "riding", "man.1"), ("man.1", "near", "horse.1")]
    s = scores(answer([MAN, HORSE], rels))
    assert s["edge_f1"] == pytest.approx(0.5) and s["node_f1"] == 1.0


def test_wrong_label_and_missed_box():
    # dog instead of horse: 1 of 2 objects right (F1 0.5), the relation's object is not a TP (F1 0).
    s = scores(answer([MAN, ("dog.1", [500, 500, 1000, 1000])], [("man.1", "riding", "dog.1")]))
    assert s["node_f1"] == pytest.approx(0.5) and s["edge_f1"] == 0.0
    # A box with IoU 0.25 < 0.5 is not a match.
    s = scores(answer([MAN, ("horse.1", [750, 750, 1000, 1000])], [("man.1", "riding", "horse.1")]))
    assert s["node_f1"] == pytest.approx(0.5) and s["edge_f1"] == 0.0


def test_duplicates_do_not_pay():
    # The same object twice: one TP, one false positive -> 2*2 / (3 + 2) = 0.8.
    s = scores(answer([MAN, HORSE, ("man.2", [0, 0, 500, 500])], [("man.1", "riding", "horse.1")]))
    assert s["node_f1"] == pytest.approx(0.8) and s["edge_f1"] == 1.0


def test_empty_graphs_and_no_relations():
    cols = dict(COLUMNS, relationships=["[]"])
    assert scores(answer([MAN, HORSE]), cols)["edge_f1"] == 1.0  # both empty
    assert scores(answer([MAN, HORSE], [("man.1", "riding", "horse.1")]), cols)["edge_f1"] == 0.0


@pytest.mark.parametrize(
    "text", ["", "no answer", "<answer>{not json</answer>", "<answer>[]</answer>", "\x00" * 50]
)
def test_garbage_scores_zero_and_never_raises(text):
    assert scores(text) == {"format": 0.0, "node_f1": 0.0, "edge_f1": 0.0}


def test_missing_columns_score_zero():
    assert scores(answer([MAN, HORSE]), {"objects": [GT_OBJECTS]}) == {
        "format": 1.0,
        "node_f1": 0.0,
        "edge_f1": 0.0,
    }
    with pytest.raises(ValueError, match="unknown F1 reward"):
        f1_rewards("qwen2_vl", weights={"edge": 1.0})


def test_lenient_format_charges_a_dropped_relation_a_quarter():
    # The second relation names an unlisted object: the parser drops it (issue "unknown_id").
    text = answer([MAN, HORSE], [("man.1", "riding", "horse.1"), ("man.1", "riding", "dog.1")])
    strict, lenient = scores(text), scores(text, strict_format=False)
    assert strict["format"] == 0.0 and lenient["format"] == 0.75
    assert strict["edge_f1"] == lenient["edge_f1"] == 1.0 and strict["node_f1"] == lenient["node_f1"] == 1.0
    assert scores(answer([MAN, HORSE]), strict_format=False)["format"] == 1.0
