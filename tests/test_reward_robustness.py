"""Rewards on hostile model output (issue 14: robustness, item 5 for geometry): never raise, stay cheap."""

from __future__ import annotations

import time

import pytest

from r1vision.tasks.color.rewards import color_accuracy, color_format
from r1vision.tasks.common import completion_text
from r1vision.tasks.geometry.rewards import build_reward_specs


def _deep(depth: int) -> list:
    """A conversational completion nested ``depth`` levels deep, past Python's recursion limit."""
    node: object = {"role": "assistant", "content": "<answer>red</answer>"}
    for i in range(depth):
        node = [node] if i % 2 else {"content": node}
    return node  # type: ignore[return-value]


def test_deeply_nested_and_cyclic_completions_do_not_raise() -> None:
    deep = _deep(50_000)
    assert completion_text(deep) == "<answer>red</answer>"
    cyclic: list = ["a"]
    cyclic.append(cyclic)
    assert completion_text(cyclic) == "a"
    assert color_accuracy(None, [deep], answer=["red"]) == [1.0]
    assert color_format(None, [deep]) == [1.0]
    for spec in build_reward_specs(eos_token_id=2):
        values = spec.func([None], [deep], solution=["\\boxed{3}"])
        assert len(values) == 1 and spec.low <= values[0] <= spec.high


def test_color_accuracy_without_answer_column_scores_zero() -> None:
    assert color_accuracy(None, ["<answer>red</answer>", "x"]) == [0.0, 0.0]


def test_color_accuracy_list_answers_are_not_matched_by_their_repr() -> None:
    completions = ["<answer>['red', 'blue']</answer>", "<answer>blue</answer>", "<answer>green</answer>"]
    answers = [["red", "blue"], ["red", "blue"], ["red", "blue"]]
    # the list is the set of accepted colours: one of them scores, the list's repr does not
    assert color_accuracy(None, completions, answer=answers) == [0.0, 1.0, 0.0]
    assert color_accuracy(None, ["<answer>3</answer>"], answer=[3]) == [0.0]  # not a colour name


def test_geometry_rewards_without_reference_columns_score_zero() -> None:
    for spec in build_reward_specs():
        assert spec.func([None], ["\\boxed{3}"]) == [0.0]


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


@pytest.mark.parametrize("name", sorted(HOSTILE_1MB))
def test_a_1mb_hostile_completion_costs_under_100ms_per_reward(name: str) -> None:
    """Quiet cost: <= ~16 ms CPU per reward (2-core box), so the 100 ms bound is >= 5x the quiet time.

    Measured as this thread's CPU time, which other processes' load does not inflate; the extraction scans
    are linear and capped, so the old quadratic scan (58-209 s on ``\\boxed{`` x 20000) fails by far.
    """
    text = HOSTILE_1MB[name]
    specs = build_reward_specs(eos_token_id=2, max_completion_length=2048)
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
    accuracy = build_reward_specs()[0].func
    completions = ["\\boxed{['3', '4']}", "\\boxed{4}", "\\boxed{5}", "\\boxed{20}"]
    solutions = [["3", "4"], ["3", "4"], ["3", "4"], 20]
    assert accuracy([None] * 4, completions, solution=solutions) == [0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "text",
    [
        "<answer>" + " " * _MB + "a",
        "<answer>" + "a" * _MB,
        "<answer>" * (_MB // 8),
        "<answer>" + " " * _MB + "</answer>",
    ],
    ids=["tag_then_spaces", "tag_then_letters", "tags", "spaces_in_tag"],
)
def test_color_rewards_on_1mb_cost_under_100ms(text: str) -> None:
    """Quiet cost <= ~14 ms CPU (the old answer regex backtracked for 1.4 s on a tag followed by spaces)."""
    for reward in (color_accuracy, color_format):
        start = time.thread_time()
        assert reward(None, [text], answer=["red"]) == [0.0]
        assert time.thread_time() - start < 0.100
