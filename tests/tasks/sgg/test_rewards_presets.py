"""SGG rewards on hostile completions (nested past the recursion limit, 1 MB) and R1-SGG's answer
shape, presets and reward sets."""

from __future__ import annotations

import json
import time

import pytest

from r1vision.tasks.sgg.f1 import f1_rewards
from r1vision.tasks.sgg.parse import parse_scene_graph
from r1vision.tasks.sgg.rewards import PRESETS, make_rewards
from tests.helpers.paths import ROOT
from tests.helpers.tasks import task_rewards

GT_OBJECTS = json.dumps(
    [{"id": "man.1", "bbox": [0, 0, 50, 100]}, {"id": "horse.1", "bbox": [50, 100, 100, 200]}]
)
GT_RELS = json.dumps([{"subject": "man.1", "predicate": "riding", "object": "horse.1"}])
COLUMNS = {"objects": [GT_OBJECTS], "relationships": [GT_RELS], "original_image_sizes": [[[100, 200]]]}
GRAPH = {
    "objects": [{"id": "man.1", "bbox": [0, 0, 500, 500]}, {"id": "horse.1", "bbox": [500, 500, 1000, 1000]}],
    "relationships": [{"subject": "man.1", "predicate": "riding", "object": "horse.1"}],
}
MB = 1_000_000
ADVERSARIAL = {
    "open answer tags": "<answer>" * (MB // 8),
    "close answer tags": "</answer>" * (MB // 9),
    "think tags": "<think>" * (MB // 7),
    "fences": "```" * (MB // 3),
    "mixed tags": "<answer>{```json<think>" * (MB // 23),
    "brackets": '<answer>{"objects": [' + "[" * MB,
    "braces": '{"objects": [' + "{" * MB,
    "escaped quotes": '{"objects": [' + '"\\' * (MB // 2),
    "many objects": '{"objects": [' + '{"id": "a.1", "bbox": [1, 2, 3, 4]},' * (MB // 36),
    "many relations": '{"objects": [{"id": "a.1", "bbox": [1, 2, 3, 4]}], "relationships": ['
    + '{"subject": "a.1", "predicate": "on", "object": "a.1"},' * (MB // 54),
}


def _all_rewards():
    return make_rewards("qwen2_vl", weights={"edge_hard": 1.0}) + f1_rewards("qwen2_vl")[1:]


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_a_1mb_adversarial_completion_costs_under_100ms_per_reward(name):
    # Quadratic scans took 21-28 s on 175 kB; linear ones take a few ms. CPU time of the best of 3 calls
    # (a fresh scorer each, so nothing is cached) keeps machine load out; 100 ms is >= 10x the quiet time.
    text = ADVERSARIAL[name]
    assert len(text) >= MB - 60
    parse_scene_graph(text)  # first-touch allocation and garbage collection are not the scan's cost
    for spec_index in range(len(_all_rewards())):
        best = float("inf")
        for _ in range(3):
            spec = _all_rewards()[spec_index]
            t0 = time.process_time()
            values = spec.func([None], [text], **COLUMNS)
            best = min(best, time.process_time() - t0)
        assert 0.0 <= values[0] <= 1.0
        assert best < 0.1, (name, spec.name, best)


def test_conversational_completions_nested_past_the_recursion_limit_never_raise():
    # This raised RecursionError in every SGG reward; the text is now extracted iteratively, so the
    # nested answer scores what the flat one scores.
    flat = "<answer>" + json.dumps(GRAPH) + "</answer>"
    deep: object = flat
    for _ in range(5000):
        deep = [{"role": "assistant", "content": deep}]
    for spec in _all_rewards():
        assert spec.func([None], [deep], **COLUMNS) == spec.func([None], [flat], **COLUMNS), spec.name


def test_strict_format_accepts_r1sggs_fenced_answer_but_not_loose_text():
    body = json.dumps(GRAPH)
    fmt = make_rewards("qwen2_vl")[0].func
    assert fmt([None], ["<answer>```json\n" + body + "\n```</answer>"]) == [1.0]
    assert fmt([None], ["<think>ok</think>\n<answer>\n```json\n" + body + "\n```\n</answer>"]) == [1.0]
    assert fmt([None], ["<answer>Sure! ```json\n" + body + "\n```</answer>"]) == [
        0.0
    ]  # chatter in the answer
    assert fmt([None], ["<answer>```json\n" + body + "</answer>"]) == [0.0]  # unclosed fence
    assert fmt([None], ["```json\n" + body + "\n```"]) == [0.0]  # no answer tags


def test_r1sgg_preset_has_r1sggs_weights_and_changes_the_box_term():
    specs = {s.name: s for s in make_rewards("qwen2_vl", preset="r1sgg")}
    assert {k: s.weight for k, s in specs.items()} == {
        "format": 1,
        "node": 2,
        "box": 2,
        "edge": 5,
        "edge_hard": 0,
    }
    assert (
        PRESETS["r1sgg"]["w_label"] == 1 and PRESETS["r1sgg"]["w_giou"] == 2 and PRESETS["r1sgg"]["w_l1"] == 5
    )
    half = json.loads(json.dumps(GRAPH))
    half["objects"][0]["bbox"] = [0, 0, 250, 500]  # IoU 0.5, L1 0.25 with the man
    text = "<answer>" + json.dumps(half) + "</answer>"
    import math

    default_box = make_rewards("qwen2_vl")[2].func([None], [text], **COLUMNS)[0]
    r1sgg_box = specs["box"].func([None], [text], **COLUMNS)[0]
    assert default_box == pytest.approx((0.5 * (0.5 + math.exp(-0.25)) + 1) / 2)
    assert r1sgg_box == pytest.approx(((2 * 0.5 + 5 * math.exp(-0.25)) / 7 + 1) / 2)
    overridden = {s.name: s.weight for s in make_rewards("qwen2_vl", preset="r1sgg", weights={"edge": 1.0})}
    assert overridden["edge"] == 1.0 and overridden["node"] == 2.0
    with pytest.raises(ValueError, match="unknown SGG reward preset"):
        make_rewards("qwen2_vl", preset="r1-sgg")


def test_task_options_reach_the_preset_and_the_f1_reward_set():
    f1 = task_rewards("sgg", family="qwen2_vl", reward_set="f1")
    assert [s.name for s in f1] == ["format", "node_f1", "edge_f1"]
    r1 = task_rewards("sgg", family="qwen2_vl", preset="r1sgg")
    assert [s.weight for s in r1] == [1.0, 2.0, 2.0, 5.0, 0.0]
    with pytest.raises(ValueError, match="reward_set"):
        task_rewards("sgg", family="qwen2_vl", reward_set="nope")
    with pytest.raises(ValueError, match="need the model family"):
        task_rewards("sgg")


def test_the_grpo_recipe_uses_r1sggs_preset():

    import yaml

    recipe = yaml.safe_load((ROOT / "configs/recipes/sgg_grpo.yaml").read_text())
    assert recipe["task_options"] == {"preset": "r1sgg"}
