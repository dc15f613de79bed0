"""Geometry reward functions: TRL calling convention, weights, ranges, hostile completions."""

from __future__ import annotations

import math
import time

import pytest

from r1vision.tasks.common import completion_text
from r1vision.tasks.geometry.rewards import (
    make_accuracy_reward,
    make_format_reward,
    make_language_reward,
    make_no_eos_penalty,
    make_rewards,
)


def _conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_accuracy_reward_strings_and_conversations() -> None:
    acc = make_accuracy_reward()
    completions = ["\\boxed{20}", _conv("<think>hm</think>\\boxed{21}"), "\\boxed{B}", "\\boxed{4}"]
    rewards = acc(
        prompts=[None] * 4,
        completions=completions,
        solution=["\\boxed{20}", "\\boxed{20}", None, "\\boxed{4}"],
        answer=["20", "20", "5", "4"],
        question=["q", "q", "Find x. Choices: A:3 B:5 C:7 D:9", "q"],
        trainer_state=object(),
        completion_ids=[[1], [2], [3], [4]],
    )
    assert rewards == [1.0, 0.0, 1.0, 1.0]
    assert acc.__name__ == "accuracy"


def test_accuracy_reward_choices_column() -> None:
    acc = make_accuracy_reward()
    assert acc(None, ["\\boxed{C}"], answer=["7"], choices=[["3", "5", "7"]]) == [1.0]


def test_format_reward() -> None:
    fmt = make_format_reward()
    texts = [
        "<think>a</think>\\boxed{1}",
        "no think",
        "<think>a<think>b</think>",
        "</think><think>",
        "<think>open",
    ]
    assert fmt(None, texts) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert make_format_reward(require_close=False)(None, ["<think>open"]) == [1.0]


def test_language_reward_is_minus_the_share_of_chinese_characters() -> None:
    """MAYE's language reward (-0.1 x the share with weight 0.1); it used to be -1 for any mix of scripts."""
    lang = make_language_reward()
    texts = ["The angle θ is 30°, so x = π/6.", "所以答案是5", "So the answer 是 5", "Ответ 5, answer", ""]
    assert lang(None, texts) == pytest.approx([0.0, -5 / 6, -1 / 17, 0.0, 0.0])


def test_no_eos_replaces_the_score_as_maye_does() -> None:
    """MAYE: the score of a response without EOS is -0.1, whatever its accuracy and format."""
    specs = make_rewards(format_weight=1.0, language_weight=0.1, no_eos_weight=0.1, eos_token_id=[2],
                         max_completion_length=4, no_eos_replaces=True)  # fmt: skip
    completions = ["<think>a</think> \\boxed{3}", "<think>a</think> \\boxed{3}"]
    cols = {"solution": ["\\boxed{3}"] * 2, "completion_ids": [[5, 6, 7, 8], [5, 6, 2]]}
    total = [sum(s.weight * v for s, v in zip(specs, vals, strict=True))
             for vals in zip(*(s.func([None] * 2, completions, **cols) for s in specs), strict=True)]  # fmt: skip
    assert total == pytest.approx([-0.1, 2.0])  # cut: exactly the penalty; complete: accuracy + format
    adding = make_rewards(no_eos_weight=0.1, eos_token_id=[2], max_completion_length=4)
    assert [s.func([None] * 2, completions, **cols)[0] for s in adding][0] == 1.0  # accuracy still counts
    with pytest.raises(ValueError, match="end-of-sequence"):
        make_rewards(no_eos_replaces=True)


def test_no_eos_penalty_with_and_without_max_length() -> None:
    eos = 151645
    by_length = make_no_eos_penalty([eos, 151643], max_completion_length=4)
    ids = [[5, 6, 7, 8], [5, 6, 7, eos], [5, 6], [5, 6, eos], []]
    assert by_length(None, ["x"] * 5, completion_ids=ids) == [-1.0, 0.0, 0.0, 0.0, 0.0]
    by_presence = make_no_eos_penalty(eos)
    assert by_presence(None, ["x"] * 3, completion_ids=[[1, 2], [1, eos], [1, 151643]]) == [-1.0, 0.0, -1.0]
    assert by_presence(None, ["x", "y"]) == [0.0, 0.0]  # no completion_ids: cannot tell
    with pytest.raises(ValueError):
        make_no_eos_penalty([])


def test_make_rewards_weights_and_names() -> None:
    specs = make_rewards(format_weight=0.5, language_weight=0.25)
    assert [(s.name, s.weight, s.low, s.high) for s in specs] == [
        ("accuracy", 1.0, 0.0, 1.0),
        ("format", 0.5, 0.0, 1.0),
        ("language", 0.25, -1.0, 0.0),
    ]
    specs = make_rewards(eos_token_id=2, max_completion_length=8, no_eos_weight=2.0)
    assert specs[-1].name == "no_eos" and specs[-1].weight == 2.0
    assert all(s.func.__name__ == s.name for s in specs)


@pytest.mark.parametrize(
    "hostile",
    ["", None, 12, ["not a message"], [{"role": "assistant", "content": None}], "\\boxed{" * 3000, "\ud800"],
)
def test_rewards_never_raise_and_stay_in_range(hostile: object) -> None:
    for spec in make_rewards(eos_token_id=0, max_completion_length=4):
        values = spec.func(None, [hostile], solution=["\\boxed{3}"], completion_ids=[None])
        assert len(values) == 1 and math.isfinite(values[0]) and spec.low <= values[0] <= spec.high


def test_completion_text_shapes() -> None:
    assert completion_text("a") == "a"
    assert completion_text(_conv("b")) == "b"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "c"}]}]) == "c"
    assert completion_text(None) == ""


_MB = 1_000_000
HOSTILE_1MB = {
    "boxes": "\\boxed{" * (_MB // 7),
    "braces": "\\boxed{" + "{" * _MB,
    "closers": "\\boxed{1}" + "}" * _MB,
    "fractions": "\\frac{1}{" * (_MB // 9),
    "numbers": "1 " * (_MB // 2),
    "answer_is": "the answer is " * (_MB // 14),
    "tags": "<answer>" * (_MB // 8),
    "thinks": "<think></think>" * (_MB // 15),
    "scripts": "数a" * (_MB // 2),
    "distinct": "".join(chr(0x4E00 + i % 20_000) for i in range(_MB)),
}


def test_geometry_rewards_without_reference_columns_score_zero() -> None:
    for spec in make_rewards():
        assert spec.func([None], ["\\boxed{3}"]) == [0.0]


@pytest.mark.parametrize("name", sorted(HOSTILE_1MB))
def test_a_1mb_hostile_completion_costs_under_100ms_per_reward(name: str) -> None:
    """Quiet cost: <= ~16 ms CPU per reward (2-core box), so the 100 ms bound is >= 5x the quiet time.

    Measured as this thread's CPU time, which other processes' load does not inflate; the extraction scans
    are linear and capped, so the old quadratic scan (58-209 s on ``\\boxed{`` x 20000) fails by far.
    """
    text = HOSTILE_1MB[name]
    specs = make_rewards(eos_token_id=2, max_completion_length=2048)
    for spec in specs:
        spec.func([None], ["warm-up"], solution=["\\boxed{3}"])
        best = float("inf")
        for _ in range(2):  # the better of two: a page fault or GC pause is not the scan's cost
            start = time.thread_time()
            values = spec.func([None], [text], solution=["\\boxed{3}"], completion_ids=[[1] * 2048])
            best = min(best, time.thread_time() - start)
        assert spec.low <= values[0] <= spec.high
        assert best < 0.100, f"{spec.name} on {name}: {best * 1000:.1f} ms"


def test_geometry_accuracy_with_list_references() -> None:
    accuracy = make_rewards()[0].func
    completions = ["\\boxed{['3', '4']}", "\\boxed{4}", "\\boxed{5}", "\\boxed{20}"]
    solutions = [["3", "4"], ["3", "4"], ["3", "4"], 20]
    assert accuracy([None] * 4, completions, solution=solutions) == [0.0, 1.0, 0.0, 1.0]
