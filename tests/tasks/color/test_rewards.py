"""Colour-task rewards: missing columns, list answers, and hostile completions stay cheap."""

from __future__ import annotations

import time

import pytest

from r1vision.tasks.color.rewards import color_accuracy, color_format


def test_color_accuracy_without_answer_column_scores_zero() -> None:
    assert color_accuracy(None, ["<answer>red</answer>", "x"]) == [0.0, 0.0]


def test_color_accuracy_list_answers_are_not_matched_by_their_repr() -> None:
    completions = ["<answer>['red', 'blue']</answer>", "<answer>blue</answer>", "<answer>green</answer>"]
    answers = [["red", "blue"], ["red", "blue"], ["red", "blue"]]
    # the list is the set of accepted colours: one of them scores, the list's repr does not
    assert color_accuracy(None, completions, answer=answers) == [0.0, 1.0, 0.0]
    assert color_accuracy(None, ["<answer>3</answer>"], answer=[3]) == [0.0]  # not a colour name


_MB = 1_000_000


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
