"""The vectorised SGG rewards give exactly the values the pre-vectorisation code gave (frozen fixture)."""

from __future__ import annotations

import json

from r1vision.tasks.common import completion_text
from tests.helpers.sgg_golden import GOLDEN, make_cases, reward_values


def _fenced_in_answer(completion) -> bool:
    text = completion_text(completion)
    return "<answer>```" in text


def _several_predicates_on_a_pair(completion) -> bool:
    """Whether the answer lists two different (normalised) predicates for one subject-object pair."""
    from r1vision.tasks.sgg.labels import normalize_predicate
    from r1vision.tasks.sgg.parse import parse_scene_graph

    parsed = parse_scene_graph(completion)
    seen: dict[tuple[str, str], set[str]] = {}
    for r in parsed.graph.relations if parsed.ok else ():
        seen.setdefault((r.subject, r.object), set()).add(normalize_predicate(r.predicate))
    return any(len(v) > 1 for v in seen.values())


def _repeated_object_label(completion) -> bool:
    """Whether the answer lists two objects with one (normalised) label: the shape copies take."""
    from r1vision.tasks.sgg.labels import normalize_object
    from r1vision.tasks.sgg.parse import parse_scene_graph

    parsed = parse_scene_graph(completion)
    names = [normalize_object(o.name) for o in parsed.graph.objects] if parsed.ok else []
    return len(set(names)) < len(names)


def test_rewards_equal_the_frozen_values_of_the_loop_implementation():
    frozen = json.loads(GOLDEN.read_text())
    cases = make_cases(frozen["n"], frozen["seed"])
    now = reward_values(cases)
    assert set(now) == set(frozen["values"])
    by_family: dict[str, list] = {}
    for c in cases:
        by_family.setdefault(c["family"], []).append(c)
    changed_format = diluted = copies = 0
    for key, values in frozen["values"].items():
        family, name = key.split("/")
        for case, old, new in zip(by_family[family], values, now[key], strict=True):
            if name.endswith("format") and _fenced_in_answer(case["completion"]):
                # <answer>```json ...```</answer> is R1-SGG's shape and now passes.
                changed_format += new != old
                continue
            if name in ("edge", "edge_hard") and _several_predicates_on_a_pair(case["completion"]):
                # several predicates on one pair now share the pair's credit: never more than before
                assert new <= old, (key, case["completion"])
                diluted += new < old
                continue
            if name == "edge_hard" and new != old:
                # copies of one object (same label, both passing IoU >= 0.5) now share its credit
                assert new < old and _repeated_object_label(case["completion"]), (key, case["completion"])
                copies += 1
                continue
            assert new == old, (key, case["completion"])  # bit-identical, not approximately equal
    assert changed_format > 0  # the fixture does exercise the fenced shape
    assert diluted > 0  # and answers with several predicates on one pair


def test_batched_geometry_equals_the_per_row_path(monkeypatch):
    """score_many (one geometry batch per call, cut into chunks) gives exactly score's per-row values."""
    from r1vision.tasks.sgg import batch
    from r1vision.tasks.sgg.labels import LabelSimilarity
    from r1vision.tasks.sgg.scorer import SGGScorer
    from tests.helpers.sgg_golden import make_cases

    cases = make_cases(40, 7)
    monkeypatch.setattr(batch, "_MAX_CELLS", 300)  # several chunks, and rows bigger than one chunk
    for opts in ({}, {"w_label": 1.0, "w_giou": 2.0, "w_l1": 5.0, "box_iou_weight": 2.0, "box_l1_weight": 5.0},
                 {"object_similarity": LabelSimilarity(head_credit=0.0)}):  # fmt: skip
        for family in sorted({c["family"] for c in cases}):
            sub = [c for c in cases if c["family"] == family]
            cols = [
                [c[k] for c in sub]
                for k in ("objects", "relationships", "original_image_sizes", "image_sizes")
            ]
            texts = [completion_text(c["completion"]) for c in sub]
            batched = SGGScorer(family, **opts).score_many(texts, *cols)
            row = SGGScorer(family, **opts)
            assert batched == [row.score(t, *(col[i] for col in cols)) for i, t in enumerate(texts)]


def _dense_cases(n: int, seed: int) -> list[tuple]:
    """Rows with many relations: shared and repeated labels, unknown predicates, self-relations, GT
    relations naming missing ids, empty sides, odd columns and repeated rows within one call."""
    import random

    rng = random.Random(seed)
    names = ["man", "men", "horse", "red circle", "circle", "cup"]
    preds = ["on", "near", "next to", "riding", "has", "Wears"]
    rows = []
    for i in range(n):
        objs = []
        for k in range(rng.randint(0, 14)):
            x, y = rng.uniform(0, 600), rng.uniform(0, 600)
            objs.append(
                {
                    "id": f"{rng.choice(names)}.{k}",
                    "bbox": [x, y, x + rng.uniform(1, 200), y + rng.uniform(1, 200)],
                }
            )
        ids = [o["id"] for o in objs] + ["ghost.1"] * (i % 5 == 0)
        rels = [
            {"subject": rng.choice(ids), "predicate": rng.choice(preds), "object": rng.choice(ids)}
            for _ in range(rng.randint(0, 3 * len(objs)) if ids else 0)
        ]
        pred = []
        for o in objs:
            if rng.random() < 0.9:
                b = [round(v * 1000 / 800 + rng.uniform(-15, 15)) for v in o["bbox"]]
                b = [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])]
                pred.append(
                    {"id": o["id"] if rng.random() < 0.8 else f"{rng.choice(names)}.{k + 40}", "bbox": b}
                )
        pids = [o["id"] for o in pred]
        prels = [
            dict(r, predicate=r["predicate"] if rng.random() < 0.8 else rng.choice(preds + ["flies over"]))
            for r in rels
            if r["subject"] in pids and r["object"] in pids
        ] + [
            {"subject": rng.choice(pids), "predicate": rng.choice(preds), "object": rng.choice(pids)}
            for _ in range(rng.randint(0, 6) if pids else 0)
        ]
        text = "<answer>" + json.dumps({"objects": pred, "relationships": prels}) + "</answer>"
        gt_objs = json.dumps(objs) if i % 17 else "{not json"
        rows.append((text, gt_objs, json.dumps(rels), [[800, 800]], None))
    return rows + rows[:5]  # repeated rows: scored once, answered twice


def test_batched_relation_scores_equal_the_per_row_path(monkeypatch):
    """score_many (batched matching and one relation join per call) equals score's per-row values on
    relation-dense rows, for several matching and threshold settings."""
    import warnings

    from r1vision.tasks.sgg import batch
    from r1vision.tasks.sgg.labels import LabelSimilarity
    from r1vision.tasks.sgg.scorer import SGGScorer

    rows = _dense_cases(120, 3)
    cols = [list(c) for c in zip(*rows, strict=True)]
    monkeypatch.setattr(batch, "_MAX_CELLS", 500)  # several chunks in one call
    monkeypatch.setattr(batch, "_MAX_REL_PAIRS", 300)  # several relation joins, some rows alone
    for opts in ({}, {"iou_threshold": 0.3}, {"w_label": 1.0, "w_giou": 2.0, "w_l1": 5.0, "box_iou_weight": 2.0,
                 "box_l1_weight": 5.0}, {"object_similarity": LabelSimilarity(head_credit=0.0)}):  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the rows with odd GT columns warn
            batched = SGGScorer("qwen2_vl", **opts).score_many(*cols)
            row = SGGScorer("qwen2_vl", **opts)
            expected = [row.score(*r) for r in rows]
        assert batched == expected
        assert any(s.edge > 0 for s in batched) and any(s.edge_hard > 0 for s in batched)
        assert any(0 < s.edge < 1 for s in batched) and any(s.edge == 0 and s.node > 0 for s in batched)


def test_hostile_answer_sizes_score_as_the_per_row_path():
    """Answers at the parser's caps (300 objects, 1000 relations, one predicate) in one call: the batch
    (chunks, bounded relation joins) gives the per-row values."""
    from r1vision.tasks.sgg.scorer import SGGScorer

    gt_objs = [{"id": f"man.{k}", "bbox": [k, k, k + 50, k + 50]} for k in range(50)]
    gt_rels = [
        {"subject": f"man.{k}", "predicate": "near", "object": f"man.{(k * 7) % 50}"} for k in range(100)
    ]
    rows = []
    for shift in (0, 3, 40):
        objs = [{"id": f"man.{k}", "bbox": [k + shift, k, k + 50, k + 50]} for k in range(300)]
        rels = [
            {"subject": f"man.{k % 300}", "predicate": "near", "object": f"man.{(k * 13) % 300}"}
            for k in range(1000)
        ]
        text = "<answer>" + json.dumps({"objects": objs, "relationships": rels}) + "</answer>"
        rows.append((text, json.dumps(gt_objs), json.dumps(gt_rels), [[800, 800]], None))
    cols = [list(c) for c in zip(*rows, strict=True)]
    batched = SGGScorer("qwen2_vl").score_many(*cols)
    row = SGGScorer("qwen2_vl")
    assert batched == [row.score(*r) for r in rows]
    assert batched[0].edge_hard > 0
