"""The compiled helpers (``r1vision._speedups`` via ``r1vision.compiled``) equal their Python paths.

Each test computes the same thing twice, once with the helper and once with it switched off (the Python
path every caller keeps), on clean, mutated and random inputs, and asserts identical results.
"""

from __future__ import annotations

import json
import math
import os
import random

import numpy as np
import pytest

from r1vision import compiled
from r1vision.tasks.sgg import batch, matching
from r1vision.tasks.sgg.ground_truth import _known_relations
from r1vision.tasks.sgg.parse import _build_graph, parse_scene_graph

NAMES = ["man", "horse", "hat", "tree", "red car", "dog"]
# The equivalence tests compare the two paths, so they need both; without the helpers the first test fails
# (unless R1VISION_PURE_PYTHON asks for the Python paths, which the rest of the suite then runs).
needs_compiled = pytest.mark.skipif(not compiled.AVAILABLE, reason="r1vision._speedups is not loaded")


def test_the_compiled_helpers_are_built():
    """CI and the benchmarks rely on them: an install that silently lost them must fail here."""
    if os.environ.get("R1VISION_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("R1VISION_PURE_PYTHON is set: the pure-Python paths are under test")
    assert compiled.AVAILABLE, "r1vision._speedups is not built: reinstall with a C compiler present"


@pytest.fixture
def pure(monkeypatch):
    """Call ``fn(*args)`` with every compiled helper switched off."""

    def run(fn, *args):
        with monkeypatch.context() as m:
            for name in ("scan_answer", "scan_truth", "pair_geometry", "relation_hits", "has_long_digit_run"):
                m.setattr(compiled, name, None)
            return fn(*args)

    return run


def _clean_answer(rng: random.Random, n_obj: int, n_rel: int) -> dict:
    objs = []
    for k in range(n_obj):
        x, y = rng.uniform(0, 900), rng.uniform(0, 900)
        box = [x, y, x + rng.uniform(0, 300), y + rng.uniform(0, 300)]
        objs.append(
            {"id": f"{rng.choice(NAMES)}.{k}", "bbox": [round(v) if rng.random() < 0.7 else v for v in box]}
        )
    rels = [
        {"subject": rng.choice(objs)["id"], "predicate": rng.choice(["on", "near", "has"]),
         "object": rng.choice(objs)["id"]}
        for _ in range(n_rel if objs else 0)
    ]  # fmt: skip
    return {"objects": objs, "relationships": rels}


# One unusual thing each; the compiled scan must hand every one of them to the Python builder.
_OBJECT_MUTATIONS = [
    lambda o: o.__setitem__("id", " " + o["id"]),
    lambda o: o.__setitem__("id", o["id"] + "\u3000"),
    lambda o: o.__setitem__("id", ""),
    lambda o: o.__setitem__("id", 7),
    lambda o: o.__setitem__("id", None),
    lambda o: o.pop("id"),
    lambda o: o.__setitem__("box", o.pop("bbox")),
    lambda o: o.__setitem__("box", [0, 0, 1, 1]),
    lambda o: o.pop("bbox"),
    lambda o: o["bbox"].__setitem__(0, True),
    lambda o: o["bbox"].__setitem__(1, "3"),
    lambda o: o["bbox"].__setitem__(2, 10**400),
    lambda o: o["bbox"].__setitem__(3, float("nan")),
    lambda o: o["bbox"].__setitem__(2, float("inf")),
    lambda o: o["bbox"].__setitem__(0, o["bbox"][2] + 1),
    lambda o: o["bbox"].append(5),
    lambda o: o.__setitem__("bbox", tuple(o["bbox"])),
    lambda o: o.__setitem__("bbox", {"x": 1}),
    lambda o: o["bbox"].__setitem__(0, -0.0),
    lambda o: o["bbox"].__setitem__(1, 2**63 + 1),
]
_RELATION_MUTATIONS = [
    lambda r: r.__setitem__("subject", "nobody.99"),
    lambda r: r.__setitem__("predicate", " on"),
    lambda r: r.__setitem__("predicate", ""),
    lambda r: r.__setitem__("object", 3),
    lambda r: r.pop("predicate"),
    lambda r: r.__setitem__("subject", r["subject"] + "\n"),
]


def _mutated(rng: random.Random, data: dict) -> dict:
    data = json.loads(json.dumps(data))
    kind = rng.random()
    if kind < 0.4 and data["objects"]:
        rng.choice(_OBJECT_MUTATIONS)(rng.choice(data["objects"]))
    elif kind < 0.6 and data["relationships"]:
        rng.choice(_RELATION_MUTATIONS)(rng.choice(data["relationships"]))
    elif kind < 0.7 and data["objects"]:
        data["objects"].append(dict(rng.choice(data["objects"])))  # a duplicate id
    elif kind < 0.8 and data["relationships"]:
        data["relationships"][0] = rng.choice(["man.0 -> on -> man.1", ["a", "b", "c"], None, 3])
    elif kind < 0.9 and data["objects"]:
        data["objects"][0] = rng.choice([None, "man.0", [1, 2], {"name": "man"}])
    return data


def _graph_tuple(data: dict) -> tuple:
    issues: list[str] = []
    graph, error = _build_graph(data, issues)
    if graph is None:
        return None, error, issues
    return (graph.objects, graph.relations), error, issues


@needs_compiled
def test_scan_answer_equals_the_python_builder(pure):
    rng = random.Random(0)
    used_fast = 0
    for case in range(1500):
        data = _clean_answer(rng, rng.randint(0, 25), rng.randint(0, 35))
        if case % 3:
            data = _mutated(rng, data)
        fast, slow = _graph_tuple(data), pure(_graph_tuple, data)
        assert fast == slow, data
        assert [tuple(map(type, o.box)) for o in (fast[0] or [[]])[0]] == [
            tuple(map(type, o.box)) for o in (slow[0] or [[]])[0]
        ]
        graph, _ = _build_graph(data, [])
        if graph is not None and graph.packed_boxes is not None:
            used_fast += 1
            boxes = np.frombuffer(graph.packed_boxes, dtype=np.float64).reshape(-1, 4)
            assert boxes.tolist() == [list(o.box) for o in graph.objects]
            index = {o.id: i for i, o in enumerate(graph.objects)}
            links = np.frombuffer(graph.packed_links, dtype=np.int64).reshape(-1, 2).tolist()
            assert links == [[index[r.subject], index[r.object]] for r in graph.relations]
    assert used_fast > 400  # the clean cases did take the compiled path


@needs_compiled
def test_parse_results_are_equal_on_whole_completions(pure):
    rng = random.Random(1)
    for _ in range(300):
        body = json.dumps(_mutated(rng, _clean_answer(rng, rng.randint(1, 8), rng.randint(0, 8))))
        text = rng.choice(["<answer>{}</answer>", "<think>x</think><answer>```json\n{}\n```</answer>", "{}"])
        text = text.format(body)
        fast, slow = parse_scene_graph(text), pure(parse_scene_graph, text)
        assert (fast.graph, fast.error, fast.issues) == (slow.graph, slow.error, slow.issues)


def _truth(objects, relationships):
    gt = matching.gt_graph(objects, relationships)
    return gt.ids, gt.names, gt.boxes, gt.relations, _known_relations(gt)


@needs_compiled
def test_scan_truth_equals_the_python_conversion(pure):
    rng = random.Random(2)
    for case in range(800):
        data = _clean_answer(rng, rng.randint(0, 20), rng.randint(0, 30))
        if case % 3 == 1:
            data = _mutated(rng, data)
        elif case % 3 == 2 and data["objects"]:
            data["objects"][0]["bbox"][0] = rng.choice([float("nan"), float("inf"), -5, 2**70])
        objs, rels = data["objects"], data["relationships"]
        try:
            fast = _truth(objs, rels)
        except Exception as exc:  # odd columns raise on both paths, with the same error
            with pytest.raises(type(exc)):
                pure(_truth, objs, rels)
            continue
        slow = pure(_truth, objs, rels)
        assert fast[0] == slow[0] and fast[1] == slow[1] and fast[3] == slow[3] and fast[4] == slow[4]
        assert fast[2].dtype == slow[2].dtype and fast[2].shape == slow[2].shape
        assert np.array_equal(fast[2], slow[2], equal_nan=True)


def _chunk(rng: random.Random, n_rows: int, scorer):
    """Parsed rows with their ground truth, as batch.batch_scores receives them."""
    rows = []
    for i in range(n_rows):
        gt = _clean_answer(rng, rng.randint(1, 12), rng.randint(0, 10))
        if rng.random() < 0.2:  # degenerate GT boxes: zero area, identical to a prediction, NaN
            gt["objects"][0]["bbox"] = rng.choice([[5, 5, 5, 5], [0, 0, 0, 0], [float("nan"), 1, 2, 3]])
        answer = {"objects": [dict(o) for o in gt["objects"]], "relationships": gt["relationships"]}
        for o in answer["objects"]:
            o["bbox"] = [
                max(0, round(v + rng.uniform(-30, 30))) if math.isfinite(v) else 1 for v in o["bbox"]
            ]
            o["bbox"][2], o["bbox"][3] = max(o["bbox"][0], o["bbox"][2]), max(o["bbox"][1], o["bbox"][3])
            if rng.random() < 0.3:
                o["id"] = rng.choice(NAMES) + "." + o["id"].split(".")[-1]
        parsed = parse_scene_graph("<answer>" + json.dumps(answer) + "</answer>")
        objs, rels = json.dumps(gt["objects"]), json.dumps(gt["relationships"])
        size = [[rng.randint(200, 1500), rng.randint(200, 1500)]]
        truth = scorer._ground_truth(objs, rels, size, None, sized=False)
        if parsed.ok:
            rows.append((i, parsed, truth))
    return rows


@pytest.mark.parametrize(
    "opts",
    [{}, {"w_label": 1.0, "w_giou": 2.0, "w_l1": 5.0}, {"w_label": 0.3, "w_giou": 1.0, "w_l1": 1.7}],
)
@pytest.mark.parametrize("credit", [None, 0.0])
@needs_compiled
def test_pair_geometry_equals_the_numpy_path(pure, opts, credit):
    from r1vision.tasks.sgg.labels import LabelSimilarity
    from r1vision.tasks.sgg.scorer import SGGScorer

    sim = None if credit is None else LabelSimilarity(head_credit=credit)
    scorer = SGGScorer("qwen2_vl", object_similarity=sim, **opts)
    rng = random.Random(3)
    for _ in range(4):
        rows = _chunk(rng, 30, scorer)
        for items in batch._chunks(rows):
            fast, slow = batch._pair_geometry(scorer, items), pure(batch._pair_geometry, scorer, items)
            assert fast.begins == slow.begins
            for a, b in zip(fast[:5], slow[:5], strict=True):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert np.array_equal(a, b, equal_nan=True)
        fast_scores = batch.batch_scores(scorer, rows)
        assert fast_scores == pure(batch.batch_scores, scorer, rows)


@needs_compiled
def test_pair_geometry_rejects_inconsistent_buffers():
    one = np.zeros(1, dtype=np.int64)
    box = np.zeros((1, 4))
    area = np.zeros(1)
    with pytest.raises(ValueError, match="pred"):
        compiled.pair_geometry(
            np.zeros((2, 4)), box, area, one + 1, one + 1, one, one, None, None, 1.0, 1.0, 1.0, 0.0
        )
    with pytest.raises(ValueError, match="row sizes"):
        compiled.pair_geometry(box, box, area, one - 1, one + 1, one, one, None, None, 1.0, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="gcode"):
        compiled.pair_geometry(box, box, area, one + 1, one + 1, one, np.zeros(3, np.int64), None, None, 1.0, 1.0, 1.0, 0.0)  # fmt: skip


@needs_compiled
def test_relation_join_equals_the_numpy_path_on_relation_dense_rows(pure):
    """Many relations per row, repeated predicates and ends, self-relations and unmatched GT objects."""
    from r1vision.tasks.sgg.scorer import SGGScorer

    rng = random.Random(5)
    soft_rows = hard_rows = 0
    for iou_threshold in (0.5, 0.0, 1.0):
        scorer = SGGScorer("qwen2_vl", iou_threshold=iou_threshold)
        rows = []
        for i in range(40):
            gt = _clean_answer(rng, rng.randint(1, 6), 0)
            ids = [o["id"] for o in gt["objects"]]
            gt["relationships"] = [
                {
                    "subject": rng.choice(ids),
                    "predicate": rng.choice(["on", "near"]),
                    "object": rng.choice(ids),
                }
                for _ in range(rng.randint(1, 25))
            ]
            answer = json.loads(json.dumps(gt))
            answer["objects"] = answer["objects"][: rng.randint(1, len(ids))]  # some GT objects unmatched
            kept = {o["id"] for o in answer["objects"]}
            answer["relationships"] = [
                r for r in answer["relationships"] if r["subject"] in kept and r["object"] in kept
            ] + [{"subject": i, "predicate": "on", "object": i} for i in kept]
            parsed = parse_scene_graph("<answer>" + json.dumps(answer) + "</answer>")
            truth = scorer._ground_truth(
                json.dumps(gt["objects"]), json.dumps(gt["relationships"]), [[900, 900]], None, sized=False
            )
            rows.append((i, parsed, truth))
        fast = batch.batch_scores(scorer, rows)
        assert fast == pure(batch.batch_scores, scorer, rows)
        soft_rows += sum(v.edge > 0 for v in fast.values())
        hard_rows += sum(v.edge_hard > 0 for v in fast.values())
    assert soft_rows > 30 and hard_rows > 30  # both conditions are exercised


@needs_compiled
def test_relation_join_rejects_out_of_range_indices():
    one, zero = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    # one row: one predicted and one GT relation, both between object 0 and itself
    n, idx, q, ok, k = one, zero, np.ones(1) / 2, np.ones(1, bool), np.ones(1)
    args = [n, idx, idx, idx, n, idx, idx, idx, n, idx, idx, idx, q, ok, k, k, k]  # fmt: skip
    assert compiled.relation_hits(*args) == [(0.25, 1.0)]
    # four predicates listed for the pair against one in the GT: a quarter of the credit
    assert compiled.relation_hits(*args[:14], k * 4, k, k) == [(0.0625, 0.25)]
    # the GT object has a third of the copies' credit: both ends are that object, so a ninth of it
    assert compiled.relation_hits(*args[:16], k / 3) == [(0.25, 1 / 9)]
    huge = one * 2**62  # products of indices must not overflow past the checks
    for position, bad in ((1, one * 3), (5, one * 2), (9, one * 5), (10, one * 7), (1, huge), (8, huge)):
        broken = list(args)
        broken[position] = bad
        with pytest.raises(ValueError, match="out of range"):
            compiled.relation_hits(*broken)
    with pytest.raises(ValueError, match="quality"):
        compiled.relation_hits(*args[:12], np.zeros(3), *args[13:])
    with pytest.raises(ValueError, match="kp"):
        compiled.relation_hits(*args[:14], np.zeros(3), k, k)
    with pytest.raises(ValueError, match="copies"):
        compiled.relation_hits(*args[:16], np.zeros(3))


@needs_compiled
def test_digit_run_check_equals_the_python_one(pure):
    from r1vision.tasks.fastjson import _has_long_digit_run

    rng = random.Random(4)
    alphabet = '0123456789 ,.-e\u0663\u00e9\ud800\U0001f600"[]{}'
    texts = ["1" * 18, "1" * 19, "x" + "9" * 19 + "x", "\u0663" * 30, "12345678901234567\u00e90"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(500)]
    texts += ["".join(rng.choice("0123456789,") for _ in range(rng.randint(0, 80))) for _ in range(500)]
    for text in texts:
        assert _has_long_digit_run(text) == pure(_has_long_digit_run, text), text
    assert sum(map(_has_long_digit_run, texts)) > 20


@needs_compiled
def test_reward_values_are_equal_with_and_without_the_helpers(pure):
    """The whole reward set on the golden fixture's cases (messy answers included)."""
    from tests.helpers.sgg_golden import make_cases, reward_values

    cases = make_cases(120, 11)
    assert reward_values(cases) == pure(reward_values, cases)
