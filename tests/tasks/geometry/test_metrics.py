"""MAYE's evaluation scheme on hand-built texts: reflection ratios, word counts, lengths, pass@k."""

from __future__ import annotations

import math

import pytest

from r1vision.tasks.geometry.metrics import (
    DECODINGS,
    REFLECTION_WORDS,
    generation_step_metrics,
    is_reflective,
    length_metrics,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_unbiased,
    reflection_metrics,
)

TEXTS = [
    "Wait, let me re-check: AB = 3. \\boxed{3}",  # reflective, correct
    "So x = 5. \\boxed{5}",  # plain, correct
    "Let me verify... hmm, WAIT. Try again: \\boxed{7}",  # reflective, incorrect
    "I'm waiting for nothing yet. \\boxed{1}",  # reflective (wait inside waiting, yet), incorrect
    "The angle is 30. \\boxed{30}",  # plain, incorrect
]
CORRECT = [True, True, False, False, False]


def test_fifteen_reflection_words() -> None:
    assert len(REFLECTION_WORDS) == 15 == len(set(REFLECTION_WORDS))
    assert {"re-check", "reevaluation", "check again", "verify", "wait", "yet"} <= set(REFLECTION_WORDS)


def test_reflection_ratios_by_hand() -> None:
    m = reflection_metrics(TEXTS, CORRECT)
    # reflective: texts 0, 2, 3 -> 3/5; correct ones {0,1}: 1 reflective of 2; incorrect {2,3,4}: 2 of 3
    assert m["reflection_analysis/reflection_ratio"] == pytest.approx(3 / 5)
    assert m["reflection_analysis/reflection_ratio_in_correct_answers"] == pytest.approx(1 / 2)
    assert m["reflection_analysis/reflection_ratio_in_incorrect_answers"] == pytest.approx(2 / 3)
    # correct among reflective {0,2,3}: 1/3; correct among non-reflective {1,4}: 1/2
    assert m["reflection_analysis/correct_ratio_in_reflection_texts"] == pytest.approx(1 / 3)
    assert m["reflection_analysis/correct_ratio_in_no_reflection_texts"] == pytest.approx(1 / 2)


def test_reflection_word_counts_are_case_insensitive_substring_totals() -> None:
    m = reflection_metrics(TEXTS, CORRECT)
    assert m["reflection_words/wait"] == 3  # "Wait", "WAIT", "waiting"
    assert m["reflection_words/re-check"] == 1
    assert m["reflection_words/verify"] == 1
    assert m["reflection_words/try again"] == 1
    assert m["reflection_words/yet"] == 1
    assert m["reflection_words/rethink"] == 0
    assert len([k for k in m if k.startswith("reflection_words/")]) == 15


def test_word_counts_count_repeats() -> None:
    m = reflection_metrics(["recheck recheck RECHECK", "Re-evaluate then reevaluation"], [True, False])
    assert m["reflection_words/recheck"] == 3
    assert m["reflection_words/re-evaluate"] == 1
    assert m["reflection_words/reevaluation"] == 1
    # MAYE counts substrings: "reevaluation" contains "reevaluat" but not "reevaluate"
    assert m["reflection_words/reevaluate"] == 0


def test_empty_groups_give_zero() -> None:
    m = reflection_metrics(["plain text", "also plain"], [True, True])
    assert m["reflection_analysis/reflection_ratio"] == 0.0
    assert m["reflection_analysis/reflection_ratio_in_incorrect_answers"] == 0.0  # no incorrect answers
    assert m["reflection_analysis/correct_ratio_in_reflection_texts"] == 0.0  # no reflective texts
    assert m["reflection_analysis/correct_ratio_in_no_reflection_texts"] == 1.0
    assert reflection_metrics([], [])["reflection_analysis/reflection_ratio"] == 0.0


def test_mismatched_lengths_raise() -> None:
    with pytest.raises(ValueError, match="2 texts but 1 verdicts"):
        reflection_metrics(["a", "b"], [True])


def test_is_reflective() -> None:
    assert is_reflective("Let me RETHINK this")
    assert is_reflective("Check again.")
    assert not is_reflective("Therefore the answer is 5.")


def test_length_metrics() -> None:
    m = length_metrics([10, 20, 2048, 30], max_length=2048)
    assert m["response_length/mean"] == pytest.approx((10 + 20 + 2048 + 30) / 4)
    assert m["response_length/clip_ratio"] == pytest.approx(1 / 4)
    assert "response_length/clip_ratio" not in length_metrics([1, 2])
    assert length_metrics([], 10) == {"response_length/mean": 0.0, "response_length/clip_ratio": 0.0}


def test_generation_step_metrics_combines_everything() -> None:
    m = generation_step_metrics(TEXTS, CORRECT, lengths=[5, 6, 7, 8, 8], max_length=8, prefix="train/")
    assert m["train/accuracy"] == pytest.approx(2 / 5)
    assert m["train/response_length/mean"] == pytest.approx(6.8)
    assert m["train/response_length/clip_ratio"] == pytest.approx(2 / 5)
    assert m["train/reflection_analysis/reflection_ratio"] == pytest.approx(3 / 5)
    assert len(m) == 1 + 2 + 5 + 15


def test_pass_at_k() -> None:
    samples = [[False, True, False], [False, False, False], [True, True, True], [False, False, True]]
    assert pass_at_k(samples) == pytest.approx(3 / 4)
    assert pass_at_k([]) == 0.0
    # unbiased estimator: n=3, c=1, k=1 -> 1/3; n=3, c=1, k=2 -> 1 - C(2,2)/C(3,2) = 2/3
    assert pass_at_k_unbiased(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k_unbiased(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k_unbiased(8, 0, 8) == 0.0
    assert pass_at_k_unbiased(8, 1, 8) == 1.0
    assert mean_pass_at_k(samples, 1) == pytest.approx((1 / 3 + 0 + 1 + 1 / 3) / 4)
    with pytest.raises(ValueError):
        pass_at_k_unbiased(2, 3, 1)
    with pytest.raises(ValueError):
        pass_at_k_unbiased(2, 1, 3)


def test_maye_decodings() -> None:
    assert DECODINGS["pass@8_t1.0"]["k"] == 8 and DECODINGS["pass@8_t1.0"]["temperature"] == 1.0
    assert DECODINGS["pass@1_t0.6"]["temperature"] == 0.6
    low = DECODINGS["pass@1_t0.01"]
    assert low["temperature"] == 0.01 and math.isclose(low["top_p"], 0.001) and low["k"] == 1
