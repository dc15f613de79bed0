"""Parser of model text -> scene graph: tolerated problems, failures, and hostile input."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from r1vision.tasks.sgg.parse import name_of, parse_scene_graph

GRAPH = {
    "objects": [
        {"id": "man.1", "bbox": [10, 20, 110, 220]},
        {"id": "horse.1", "bbox": [50, 100, 400, 380]},
        {"id": "hat.1", "bbox": [30, 10, 60, 40]},
    ],
    "relationships": [
        {"subject": "man.1", "predicate": "riding", "object": "horse.1"},
        {"subject": "man.1", "predicate": "wearing", "object": "hat.1"},
    ],
}
ANSWER = "<answer>" + json.dumps(GRAPH) + "</answer>"


def test_clean_answer_parses_without_issues():
    r = parse_scene_graph(ANSWER)
    assert r.ok and r.issues == [] and r.tagged
    assert [o.id for o in r.graph.objects] == ["man.1", "horse.1", "hat.1"]
    assert r.graph.objects[0].name == "man" and r.graph.objects[1].box == (50.0, 100.0, 400.0, 380.0)
    assert [(x.subject, x.predicate, x.object) for x in r.graph.relations] == [
        ("man.1", "riding", "horse.1"),
        ("man.1", "wearing", "hat.1"),
    ]


def test_think_fence_and_trailing_text_are_tolerated_but_recorded():
    r = parse_scene_graph("<think>two things</think>\n" + ANSWER)
    assert r.ok and r.has_think and r.issues == []
    fenced = parse_scene_graph("Here you go:\n```json\n" + json.dumps(GRAPH) + "\n```\nHope it helps")
    assert fenced.ok and len(fenced.graph.objects) == 3
    assert "fenced" in fenced.issues and "missing_answer_tags" in fenced.issues and not fenced.tagged
    after = parse_scene_graph(ANSWER + " and more")
    assert after.ok and "text_after_answer" in after.issues
    inside = parse_scene_graph("<answer>" + json.dumps(GRAPH) + " trailing words</answer>")
    assert inside.ok and "trailing_text" in inside.issues
    bare = parse_scene_graph(json.dumps(GRAPH))
    assert bare.ok and bare.issues == ["missing_answer_tags"]


def test_bad_objects_are_dropped_with_reasons():
    graph = {
        "objects": [
            {"id": "a.1", "bbox": [0, 0, 10, 10]},
            {"id": "a.1", "bbox": [5, 5, 20, 20]},  # duplicate id
            {"id": "b.1", "bbox": ["0", 0, 10, 10]},  # non-numeric
            {"id": "c.1", "bbox": [10, 0, 0, 10]},  # inverted
            {"id": "d.1", "bbox": [0, 0, 10]},  # wrong length
            {"bbox": [0, 0, 1, 1]},  # no id
            {"id": "e.1", "bbox": [0, 0, 5, 5]},
        ],
        "relationships": [
            {"subject": "a.1", "predicate": "near", "object": "e.1"},
            {"subject": "a.1", "predicate": "near", "object": "c.1"},  # c.1 was dropped
            {"subject": "zz.9", "predicate": "on", "object": "a.1"},  # unknown id
            {"subject": "a.1", "object": "e.1"},  # no predicate
            "e.1 -> under -> a.1",
        ],
    }
    r = parse_scene_graph("<answer>" + json.dumps(graph) + "</answer>")
    assert r.ok
    assert [o.id for o in r.graph.objects] == ["a.1", "e.1"]
    assert r.graph.objects[0].box == (0.0, 0.0, 10.0, 10.0)  # the first of the duplicates wins
    assert [(x.subject, x.predicate, x.object) for x in r.graph.relations] == [
        ("a.1", "near", "e.1"),
        ("e.1", "under", "a.1"),
    ]
    for issue in ("duplicate_id", "non_numeric_box", "inverted_box", "invalid_box", "invalid_object"):
        assert issue in r.issues
    assert r.issues.count("unknown_id") == 2 and "invalid_relation" in r.issues


def test_non_finite_boxes_are_rejected():
    r = parse_scene_graph(
        '<answer>{"objects": [{"id": "a.1", "bbox": [0, 0, NaN, Infinity]}], "relationships": []}</answer>'
    )
    assert r.ok and r.graph.objects == [] and "non_finite_box" in r.issues


def test_truncated_json_recovers_complete_objects_and_relations():
    text = json.dumps(GRAPH)
    cut = text[: text.index('"wearing"')]  # inside the second relation
    r = parse_scene_graph("<answer>" + cut)
    assert r.ok and "truncated_json" in r.issues and "unclosed_answer_tag" in r.issues
    assert [o.id for o in r.graph.objects] == ["man.1", "horse.1", "hat.1"]
    assert [x.predicate for x in r.graph.relations] == ["riding"]
    cut_obj = text[: text.index('"hat.1"')]  # inside the third object
    r2 = parse_scene_graph(cut_obj)
    assert r2.ok and [o.id for o in r2.graph.objects] == ["man.1", "horse.1"] and r2.graph.relations == []


def test_failures_carry_reasons():
    assert parse_scene_graph("no json here").error == "no_json"
    assert parse_scene_graph("<answer>{oops</answer>").error == "invalid_json"
    assert parse_scene_graph('<answer>{"relationships": []}</answer>').error == "missing_objects"
    assert parse_scene_graph("").error == "no_json"
    assert parse_scene_graph(None).error == "no_json"  # type: ignore[arg-type]
    deep = parse_scene_graph("{" + '"a":[' * 5000)
    assert not deep.ok


def test_message_list_completions_and_names():
    msgs = [{"role": "assistant", "content": ANSWER}]
    assert parse_scene_graph(msgs).ok
    typed = [{"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]
    assert len(parse_scene_graph(typed).graph.objects) == 3
    assert name_of("red circle.2") == "red circle"
    assert name_of("man") == "man" and name_of("man_3") == "man" and name_of("v1.2.3") == "v1.2"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_random_text_never_raises(text):
    r = parse_scene_graph(text)
    assert (r.graph is None) == (r.error is not None)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(ANSWER)), st.text(max_size=20), st.integers(0, len(ANSWER)))
def test_mutated_answers_never_raise_and_keep_only_real_objects(cut, insert, pos):
    text = ANSWER[:pos] + insert + ANSWER[pos:cut] if pos < cut else ANSWER[:cut]
    r = parse_scene_graph(text)
    if r.ok:
        known = {o["id"]: tuple(float(v) for v in o["bbox"]) for o in GRAPH["objects"]}
        ids = {o.id for o in r.graph.objects}
        assert len(ids) == len(r.graph.objects)
        for rel in r.graph.relations:
            assert rel.subject in ids and rel.object in ids
        if not insert:
            assert all(known.get(o.id) == o.box for o in r.graph.objects)


def test_whole_document_decode_gives_what_the_raw_decode_path_gives(monkeypatch):
    """_decode first tries one fastjson decode of the rest of the answer; whatever it accepts or refuses,
    the ParseResult equals the one of the raw_decode path alone (issues, errors and graph)."""
    from r1vision.tasks.sgg import parse

    body = json.dumps(GRAPH)
    texts = [
        ANSWER,
        "<answer>" + body + "  \n\t</answer>",
        "<answer>" + body + "\u00a0\u2028\x0b</answer>",  # whitespace to str.strip, not to JSON
        "<answer>" + body + " trailing</answer>",
        "<answer>" + body + body + "</answer>",
        "<answer>note { " + body + "</answer>",
        "<answer>[" + body + "]</answer>",
        "<answer>" + body.replace("10, 20", "NaN, Infinity") + "</answer>",
        "<answer>" + body.replace("10, 20", "1" * 25 + ", 20") + "</answer>",
        "<answer>" + body.replace("10, 20", "1e400, 20") + "</answer>",
        "<answer>" + body.replace("man.1", "man\\ud800.1") + "</answer>",
        "<answer>" + body[:-30] + "</answer>",
        "<answer>" + "[" * 5000 + "</answer>",
        "<answer>" + '{"objects": ' + "[" * 3000 + "]" * 3000 + "}</answer>",
        '<answer>{"objects": [], "relationships": []}\n</answer>',
        "```json\n" + body + "\n```",
    ]
    fast = [parse_scene_graph(t) for t in texts]

    def refuse(text):
        raise ValueError("forced slow path")

    monkeypatch.setattr(parse.fastjson, "loads", refuse)
    for text, result in zip(texts, fast, strict=True):
        assert result == parse_scene_graph(text), text[:80]


def test_integer_boxes_are_checked_as_floats():
    """Integer boxes: overflow is non-finite, inversion is judged on the floats, bools are not numbers."""

    def issues(box) -> list[str]:
        text = json.dumps({"objects": [{"id": "a.1", "bbox": box}], "relationships": []})
        return parse_scene_graph("<answer>" + text + "</answer>").issues

    assert issues([1, 2, 3, 4]) == []
    assert issues([10**400, 2, 3, 4]) == ["non_finite_box"]
    assert issues([2**53 + 1, 0, 2**53, 1]) == []  # equal as floats, as the float path compares them
    assert issues([3, 2, 1, 4]) == ["inverted_box"]
    assert issues([True, 2, 3, 4]) == ["non_numeric_box"]
    box = parse_scene_graph(
        "<answer>" + json.dumps({"objects": [{"id": "a.1", "bbox": [1, 2, 3, 4]}]}) + "</answer>"
    )
    assert all(type(v) is float for v in box.graph.objects[0].box)
