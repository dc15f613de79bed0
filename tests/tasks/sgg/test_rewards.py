"""SGG rewards: hand-computed values, the box convention round trip per family, and hostile input."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r1vision.tasks.sgg.data import image_size, sft_target
from r1vision.tasks.sgg.labels import EmbeddingSimilarity, LabelSimilarity, normalize_object
from r1vision.tasks.sgg.rewards import (
    format_reward,
    group_normalize,
    make_rewards,
    select_groups_by_std,
    warmup_factor,
    with_warmup,
)
from r1vision.tasks.sgg.synth import make_config, synth_rows
from r1vision.vision.budget import PixelBudget

# 100 x 200 image; in the 0-1000 frame man = [0, 0, 500, 500], horse = [500, 500, 1000, 1000].
GT_OBJECTS = json.dumps(
    [{"id": "man.1", "bbox": [0, 0, 50, 100]}, {"id": "horse.1", "bbox": [50, 100, 100, 200]}]
)
GT_RELS = json.dumps([{"subject": "man.1", "predicate": "riding", "object": "horse.1"}])
COLUMNS = {"objects": [GT_OBJECTS], "relationships": [GT_RELS], "original_image_sizes": [[[100, 200]]]}


def answer(objects, relations=()):
    payload = {
        "objects": [{"id": i, "bbox": b} for i, b in objects],
        "relationships": [{"subject": s, "predicate": p, "object": o} for s, p, o in relations],
    }
    return "<answer>" + json.dumps(payload) + "</answer>"


def scores(text, family="qwen2_vl", columns=COLUMNS, **kwargs):
    return {s.name: s.func([None], [text], **columns)[0] for s in make_rewards(family, **kwargs)}


def test_perfect_graph_gets_full_marks_including_format():
    # R1-SGG's format reward hashes dicts and gives 0 to every non-empty valid graph; ours gives 1.
    text = answer(
        [("man.1", [0, 0, 500, 500]), ("horse.1", [500, 500, 1000, 1000])], [("man.1", "riding", "horse.1")]
    )
    assert scores(text) == {"format": 1.0, "node": 1.0, "box": 1.0, "edge": 1.0, "edge_hard": 1.0}
    assert format_reward(strict=False)([None], [text])[0] == 1.0
    assert format_reward(require_think=True)([None], [text])[0] == 0.0
    assert format_reward(require_think=True)([None], ["<think>ok</think> " + text])[0] == 1.0


def test_wrong_label_costs_node_and_edge_but_not_box():
    text = answer(
        [("man.1", [0, 0, 500, 500]), ("dog.1", [500, 500, 1000, 1000])], [("man.1", "riding", "dog.1")]
    )
    s = scores(text)
    assert s["node"] == pytest.approx(0.5) and s["box"] == pytest.approx(1.0)
    assert s["edge"] == 0.0 and s["edge_hard"] == 0.0 and s["format"] == 1.0


def test_half_width_box_by_hand():
    # man predicted [0, 0, 250, 500]: IoU 0.5, L1 on normalised boxes 0.25 -> box term (0.5 + e^-0.25) / 2.
    text = answer(
        [("horse.1", [500, 500, 1000, 1000]), ("man.1", [0, 0, 250, 500])], [("man.1", "riding", "horse.1")]
    )
    s = scores(text)
    man = 0.5 * (0.5 + math.exp(-0.25))
    assert s["node"] == pytest.approx(1.0)
    assert s["box"] == pytest.approx((man + 1.0) / 2)
    assert s["edge"] == pytest.approx(man)  # sim(pred) * q(man) * q(horse) = 1 * man * 1
    assert s["edge_hard"] == 1.0  # IoU 0.5 reaches the threshold


@pytest.mark.parametrize("pure_python", [False, True])
def test_listing_every_predicate_for_a_pair_does_not_earn_full_credit(monkeypatch, pure_python):
    """The edge rewards were gamed by listing all 50 VG150 predicates for a pair (1.0; R1-SGG: 0.047).

    Rule: a hit is worth min(1, g / k), g the GT predicates of the GT pair, k the distinct predicates the
    answer lists for its pair. The per-row scorer, the batched numpy path and the compiled path agree.
    """
    from r1vision import compiled
    from r1vision.tasks.sgg.categories import load_vocabulary
    from r1vision.tasks.sgg.scorer import SGGScorer

    if pure_python:
        monkeypatch.setattr(compiled, "relation_hits", None)
    objects = [("man.1", [0, 0, 500, 500]), ("horse.1", [500, 500, 1000, 1000])]
    predicates = load_vocabulary("vg150").predicates
    spam = answer(objects, [("man.1", p, "horse.1") for p in predicates])
    honest = answer(objects, [("man.1", "riding", "horse.1")])
    two = json.dumps([{"subject": "man.1", "predicate": p, "object": "horse.1"} for p in ("riding", "on")])
    two_cols = {**COLUMNS, "relationships": [two]}
    for family in ("qwen2_vl",):
        s = scores(spam, family)
        assert (
            len(predicates) == 50
            and s["edge"] == pytest.approx(1 / 50)
            and s["edge_hard"] == pytest.approx(1 / 50)
        )
        assert scores(honest, family)["edge"] == 1.0
        # as many predicates as the ground truth has still earn full credit; one of two earns half
        both = answer(objects, [("man.1", "riding", "horse.1"), ("man.1", "on", "horse.1")])
        assert (
            scores(both, family, two_cols)["edge"] == 1.0 and scores(honest, family, two_cols)["edge"] == 0.5
        )
        assert scores(spam, family, two_cols)["edge"] == pytest.approx(2 / 50)
        # a duplicate of one predicate is one predicate
        dup = answer(objects, [("man.1", "riding", "horse.1")] * 3)
        assert scores(dup, family)["edge"] == 1.0
        scorer = SGGScorer(family)
        cols = [COLUMNS[k] * 3 for k in ("objects", "relationships", "original_image_sizes")]
        batched = scorer.score_many([spam, honest, dup], *cols, [None] * 3)
        assert [round(b.edge, 12) for b in batched] == [round(1 / 50, 12), 1.0, 1.0]


@pytest.mark.parametrize("pure_python", [False, True])
def test_copies_of_an_object_share_its_edge_hard_credit(monkeypatch, pure_python):
    """``edge_hard`` was gamed by repeating each object 50 times with one predicate per copy pair (0.909):
    copies passing the label-and-IoU test for one GT object now share that object's credit, as predicates
    share a pair's; two GT objects that overlap keep full credit. Per-row, batched and compiled agree."""
    from r1vision import compiled
    from r1vision.tasks.sgg.categories import load_vocabulary
    from r1vision.tasks.sgg.scorer import SGGScorer

    if pure_python:
        monkeypatch.setattr(compiled, "relation_hits", None)
    predicates = load_vocabulary("vg150").predicates
    copies = [(f"man.{i}", [0, 0, 500, 500]) for i in range(1, 51)]
    copies += [(f"horse.{i}", [500, 500, 1000, 1000]) for i in range(1, 51)]
    spam = answer(copies, [(f"man.{i + 1}", p, f"horse.{i + 1}") for i, p in enumerate(predicates)])
    one_copy = answer(copies[:1] + copies[50:51], [("man.1", "riding", "horse.1")])
    twice = answer([*copies[:2], copies[50]], [("man.1", "riding", "horse.1")])  # the man listed twice
    assert scores(spam)["edge_hard"] == pytest.approx(1 / 50 / 50)
    assert scores(one_copy)["edge_hard"] == 1.0
    assert scores(twice)["edge_hard"] == pytest.approx(0.5)
    # two people standing together in the GT (IoU 0.6), both found: no copies, full credit
    people = json.dumps(
        [{"id": "man.1", "bbox": [0, 0, 50, 100]}, {"id": "man.2", "bbox": [0, 0, 50, 60]},
         {"id": "horse.1", "bbox": [50, 100, 100, 200]}]
    )  # fmt: skip
    rels = json.dumps(
        [{"subject": s, "predicate": "riding", "object": "horse.1"} for s in ("man.1", "man.2")]
    )
    both_cols = {**COLUMNS, "objects": [people], "relationships": [rels]}
    both = answer(
        [("man.1", [0, 0, 500, 500]), ("man.2", [0, 0, 500, 300]), ("horse.1", [500, 500, 1000, 1000])],
        [("man.1", "riding", "horse.1"), ("man.2", "riding", "horse.1")],
    )
    assert scores(both, columns=both_cols)["edge_hard"] == 1.0
    scorer = SGGScorer("qwen2_vl")
    cols = [COLUMNS[k] * 3 for k in ("objects", "relationships", "original_image_sizes")]
    batched = scorer.score_many([spam, one_copy, twice], *cols, [None] * 3)
    assert [round(b.edge_hard, 12) for b in batched] == [round(1 / 2500, 12), 1.0, 0.5]


def test_missing_object_and_relation():
    s = scores(answer([("man.1", [0, 0, 500, 500])]))
    assert s["node"] == pytest.approx(0.5) and s["box"] == pytest.approx(0.5)
    assert s["edge"] == 0.0 and s["edge_hard"] == 0.0
    assert s["format"] == 1.0  # a valid graph, even if incomplete


def test_label_normalisation_and_similarity():
    text = answer(
        [("Man.1", [0, 0, 500, 500]), ("horses.1", [500, 500, 1000, 1000])], [("Man.1", "Riding", "horses.1")]
    )
    s = scores(text)
    assert s["edge_hard"] == 1.0 and s["node"] == 1.0 and s["edge"] == 1.0  # case and plural normalised
    men = scores(text.replace("Man.1", "men.1"))  # VG150 keeps "men" and "man" apart
    assert men["node"] == pytest.approx(0.5) and men["edge_hard"] == 0.0
    assert normalize_object("T-shirt.3") == "shirt" and normalize_object("Glasses") == "glasses"
    sim = LabelSimilarity()
    assert sim("red circle", "circle") == 0.5 and sim("cats", "cat") == 1.0 and sim("cat", "dog") == 0.0
    vectors = {"dog": [1.0, 0.0], "puppy": [1.0, 0.0], "cat": [0.6, 0.8], "car": [-1.0, 0.0]}
    emb = EmbeddingSimilarity(lambda labels: [vectors.get(labels[0], [0.0, 1.0])])
    assert emb("cat", "dog") == pytest.approx(0.6) and emb("car", "dog") == 0.0 and emb("dogs", "dog") == 1.0
    s2 = scores(answer([("cat.1", [0, 0, 500, 500])]), object_similarity=emb, columns={
        "objects": [json.dumps([{"id": "dog.1", "bbox": [0, 0, 50, 100]}])], "relationships": ["[]"],
        "original_image_sizes": [[[100, 200]]]})  # fmt: skip
    assert s2["node"] == pytest.approx(0.6)


def test_format_modes_and_failures():
    strict, lenient = format_reward(), format_reward(strict=False)
    cases = {
        "garbage": (0.0, 0.0),
        '<answer>{"objects": []}</answer>': (
            0.0,
            0.75,
        ),  # tags + json, but no objects and no relationships key
        '```json\n{"objects": [{"id": "a.1", "bbox": [0, 0, 1, 1]}], "relationships": []}\n```': (0.0, 0.75),
        '<answer>{"objects": [{"id": "a.1", "bbox": [5, 0, 1, 1]}], "relationships": []}</answer>': (
            0.0,
            0.5,
        ),
    }
    for text, (s, lv) in cases.items():
        assert strict([None], [text])[0] == s, text
        assert lenient([None], [text])[0] == pytest.approx(lv), text


@pytest.mark.parametrize(
    "family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"]
)
def test_box_convention_round_trip_gives_max_reward(family):
    rows = synth_rows(4, seed=11, split="train", cfg=make_config("default"))
    budget = PixelBudget.for_family(family, max_pixels=512 * 28 * 28)
    for row in rows:
        size = image_size(row["image"])
        target = sft_target(row["objects"], row["relationships"], size, family, budget)
        cols = {
            "objects": [row["objects"]],
            "relationships": [row["relationships"]],
            "original_image_sizes": [[list(size)]],
            "image_sizes": [[list(budget.resized_size(*size))]],
        }
        completion = [{"role": "assistant", "content": target}]
        got = {s.name: s.func([None], [completion], **cols)[0] for s in make_rewards(family, budget=budget)}
        assert got == {"format": 1.0, "node": 1.0, "box": 1.0, "edge": 1.0, "edge_hard": 1.0}, (family, got)


def test_wrong_frame_is_penalised():
    # A Qwen2.5-VL (resized pixels) target read as a Qwen2-VL (0-1000) answer must not score the maximum.
    row = synth_rows(1, seed=3, split="train")[0]
    size = image_size(row["image"])
    target = sft_target(row["objects"], row["relationships"], size, "qwen2_5_vl")
    cols = {
        "objects": [row["objects"]],
        "relationships": [row["relationships"]],
        "original_image_sizes": [[list(size)]],
    }
    box = [s for s in make_rewards("qwen2_vl") if s.name == "box"][0]
    assert box.func([None], [target], **cols)[0] < 0.9


def test_missing_sizes_warn_and_use_gt_frame():
    text = answer(
        [("man.1", [0, 0, 50, 100]), ("horse.1", [50, 100, 100, 200])], [("man.1", "riding", "horse.1")]
    )
    with pytest.warns(UserWarning, match="no image sizes"):
        s = scores(text, columns={"objects": [GT_OBJECTS], "relationships": [GT_RELS]})
    assert s["box"] == 1.0


def test_group_normalisation_warmup_and_filtering():
    assert group_normalize([1, 0, 1, 0], 2) == pytest.approx([1, -1, 1, -1], abs=1e-3)
    assert group_normalize([3, 3], 2) == [0.0, 0.0]

    class State:
        global_step = 5

    assert warmup_factor(State(), 10) == 0.5 and warmup_factor({"global_step": 50}, 10) == 1.0
    assert warmup_factor(None, 10) == 1.0
    f = with_warmup(lambda prompts, completions, **kw: [1.0] * len(completions), 10)
    assert f(None, ["a", "b"], trainer_state=State()) == [0.5, 0.5]
    rewards = [0, 0, 0, 1, 0.5, 0.5, 0, 0.2]
    assert select_groups_by_std(rewards, 2, 2) == [2, 3, 6, 7]
    assert select_groups_by_std(rewards, 2, 0.25) == [2, 3]
    with pytest.raises(ValueError):
        select_groups_by_std(rewards, 3, 1)
    specs = make_rewards("qwen2_vl", group_size=2, warmup_steps=4, weights={"edge_hard": 0.5})
    assert {s.name: s.weight for s in specs}["edge_hard"] == 0.5 and specs[0].low < 0
    assert all(s.func.__name__ == s.name for s in specs)
    with pytest.raises(ValueError, match="unknown SGG reward"):
        make_rewards("qwen2_vl", weights={"nope": 1.0})


GOOD = answer(
    [("man.1", [0, 0, 500, 500]), ("horse.1", [500, 500, 1000, 1000])], [("man.1", "riding", "horse.1")]
)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.builds(lambda i, t: GOOD[:i] + t, st.integers(0, len(GOOD)), st.text(max_size=30)),
    )
)
def test_rewards_stay_in_range_on_hostile_text(text):
    for spec in make_rewards("qwen2_5_vl", strict_format=False):
        cols = dict(COLUMNS, image_sizes=[[[112, 224]]])
        value = spec.func([None], [text], **cols, trainer_state=None, completion_ids=[[1, 2]])[0]
        assert isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0


def test_random_boxes_stay_in_range():
    rng = random.Random(0)
    texts = []
    for _ in range(50):
        objs = []
        for k in range(rng.randint(0, 6)):
            x1, y1 = rng.uniform(-500, 1500), rng.uniform(-500, 1500)
            objs.append(
                (
                    f"{rng.choice(['man', 'horse', 'x'])}.{k}",
                    [x1, y1, x1 + rng.uniform(0, 800), y1 + rng.uniform(0, 800)],
                )
            )
        rels = [(a[0], rng.choice(["riding", "on"]), b[0]) for a in objs for b in objs if rng.random() < 0.3]
        texts.append(answer(objs, rels))
    for spec in make_rewards("qwen3_vl"):
        values = spec.func([None] * len(texts), texts, **{k: v * len(texts) for k, v in COLUMNS.items()})
        assert all(0.0 <= v <= 1.0 and math.isfinite(v) for v in values)


@pytest.mark.parametrize("pure_python", [False, True])
def test_ground_truth_boxes_of_three_numbers_never_make_a_reward_raise(monkeypatch, pure_python):
    """Four GT boxes of 3 numbers each reshaped into 3 boxes of 4 and the compiled pair geometry raised
    (``gt has 96 bytes, expected 128``); the pure-Python path raised an IndexError."""
    from r1vision import compiled
    from r1vision.tasks.sgg.f1 import f1_rewards

    if pure_python:
        for name in ("pair_geometry", "relation_hits", "scan_truth", "scan_answer"):
            monkeypatch.setattr(compiled, name, None)
    bad = [{"id": f"x.{i}", "bbox": [0, 0, 5 + i]} for i in range(3)] + [{"id": "man.1", "bbox": [0, 0, 50]}]
    mixed = [{"id": "man.1", "bbox": [0, 0, 50, 100]}, {"id": "horse.1", "bbox": [50, 100, 100]}]
    good = json.loads(GT_OBJECTS)
    objects = [json.dumps(bad), json.dumps(mixed), json.dumps(good), bad, mixed, good]
    n = len(objects)
    text = answer(
        [("man.1", [0, 0, 500, 500]), ("horse.1", [500, 500, 1000, 1000])], [("man.1", "riding", "horse.1")]
    )
    cols = {"objects": objects, "relationships": [GT_RELS] * n, "original_image_sizes": [[[100, 200]]] * n}
    from r1vision.tasks.sgg import matching

    monkeypatch.setattr(matching, "_WARNED", set())
    matching._gt_from_json.cache_clear()
    with pytest.warns(UserWarning, match="malformed bbox"):
        values = {s.name: s.func([None] * n, [text] * n, **cols) for s in make_rewards("qwen2_vl")}
    values.update({s.name: s.func([None] * n, [text] * n, **cols) for s in f1_rewards("qwen2_vl")})
    for name, vals in values.items():
        assert len(vals) == n and all(0.0 <= v <= 1.0 for v in vals), (name, vals)
    # a malformed GT object is left out: the valid man is the whole ground truth, the relation naming
    # the horse cannot be recalled (it still counts in the denominator)
    assert values["node"][0] == 0.0 and values["node"][1] == 1.0 and values["edge"][1] == 0.0
    assert values["node"][2] == 1.0 and values["edge"][2] == 1.0


def test_evaluation_names_the_row_of_a_malformed_ground_truth_box():
    from r1vision.tasks.loading import DatasetLoadError
    from r1vision.tasks.sgg.evaluate import GroundTruthError, evaluate_sgg

    size = {"original_image_sizes": [[100, 200]]}
    rows = [{"image_id": "a", "objects": GT_OBJECTS, "relationships": GT_RELS, **size},
            {"image_id": "b", "objects": json.dumps([{"id": "man.1", "bbox": [0, 0, 5]}]), "relationships": "[]",
             **size}]  # fmt: skip
    with pytest.raises(
        GroundTruthError, match=r"row 1 \(image_id='b'\): object 'man.1' has bbox \[0, 0, 5\]"
    ):
        evaluate_sgg(rows, {"a": "x", "b": "y"}, model_family="qwen2_vl")
    assert issubclass(GroundTruthError, DatasetLoadError)  # the CLI's one-line refusal, exit 2
