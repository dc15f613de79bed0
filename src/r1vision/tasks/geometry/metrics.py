"""MAYE's evaluation scheme: per-generation-step response and reflection metrics, and pass@k accuracy.

Definitions follow MAYE (Ma et al., 2025, arXiv:2504.02587):

- a response is *reflective* when its lower-cased text contains any of the 15 :data:`REFLECTION_WORDS`
  as a substring (so ``"waiting"`` counts for ``wait``, as in MAYE);
- the five ratios are the reflective share overall, within correct responses and within incorrect ones,
  and the correct share within reflective and within non-reflective responses (0.0 when a group is empty);
- word counts are total substring occurrences over all responses of the step;
- pass@k at a decoding counts an item correct when any of its k samples is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

REFLECTION_WORDS: tuple[str, ...] = (
    "re-check",
    "re-evaluate",
    "re-examine",
    "re-think",
    "recheck",
    "reevaluate",
    "reexamine",
    "reevaluation",
    "rethink",
    "check again",
    "think again",
    "try again",
    "verify",
    "wait",
    "yet",
)

# MAYE's three evaluation decodings (vLLM sampling parameters, max_tokens 2048).
DECODINGS: dict[str, dict[str, Any]] = {
    "pass@8_t1.0": {"k": 8, "temperature": 1.0, "top_p": 1.0, "max_tokens": 2048},
    "pass@1_t0.6": {"k": 1, "temperature": 0.6, "top_p": 1.0, "max_tokens": 2048},
    "pass@1_t0.01": {"k": 1, "temperature": 0.01, "top_p": 0.001, "max_tokens": 2048},
}


def is_reflective(text: str) -> bool:
    """Whether ``text`` contains any reflection word (case-insensitive substring)."""
    lower = text.lower()
    return any(word in lower for word in REFLECTION_WORDS)


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def reflection_metrics(
    texts: Sequence[str], is_correct: Sequence[bool], prefix: str = ""
) -> dict[str, float]:
    """The 5 reflection ratios and the 15 word counts of one generation step.

    Keys: ``{prefix}reflection_analysis/<ratio>`` and ``{prefix}reflection_words/<word>``.
    """
    if len(texts) != len(is_correct):
        raise ValueError(f"reflection_metrics: {len(texts)} texts but {len(is_correct)} verdicts")
    lowered = [str(t).lower() for t in texts]
    correct = [bool(c) for c in is_correct]
    reflective = [any(w in t for w in REFLECTION_WORDS) for t in lowered]
    n = len(lowered)
    n_correct = sum(correct)
    n_reflective = sum(reflective)
    both = sum(r and c for r, c in zip(reflective, correct, strict=True))
    out = {
        "reflection_ratio": _ratio(n_reflective, n),
        "reflection_ratio_in_correct_answers": _ratio(both, n_correct),
        "reflection_ratio_in_incorrect_answers": _ratio(n_reflective - both, n - n_correct),
        "correct_ratio_in_reflection_texts": _ratio(both, n_reflective),
        "correct_ratio_in_no_reflection_texts": _ratio(n_correct - both, n - n_reflective),
    }
    metrics = {f"{prefix}reflection_analysis/{k}": float(v) for k, v in out.items()}
    for word in REFLECTION_WORDS:
        metrics[f"{prefix}reflection_words/{word}"] = float(sum(t.count(word) for t in lowered))
    return metrics


def length_metrics(
    lengths: Sequence[int], max_length: int | None = None, prefix: str = ""
) -> dict[str, float]:
    """Mean response length (tokens) and length-clip ratio (share of responses at ``max_length``)."""
    metrics = {f"{prefix}response_length/mean": float(sum(lengths) / len(lengths)) if lengths else 0.0}
    if max_length is not None:
        clipped = sum(1 for n in lengths if n >= max_length)
        metrics[f"{prefix}response_length/clip_ratio"] = _ratio(clipped, len(lengths))
    return metrics


def generation_step_metrics(
    texts: Sequence[str],
    is_correct: Sequence[bool],
    lengths: Sequence[int] | None = None,
    max_length: int | None = None,
    prefix: str = "",
) -> dict[str, float]:
    """Everything MAYE logs per generation step: accuracy, lengths, reflection ratios and word counts.

    ``lengths`` are token counts per response (e.g. ``len(completion_ids[i])``); when absent, the length
    metrics are omitted rather than guessed from characters.
    """
    metrics = {f"{prefix}accuracy": _ratio(sum(bool(c) for c in is_correct), len(is_correct))}
    if lengths is not None:
        metrics.update(length_metrics(lengths, max_length, prefix))
    metrics.update(reflection_metrics(texts, is_correct, prefix))
    return metrics


def pass_at_k(samples_correct: Sequence[Sequence[bool]]) -> float:
    """MAYE's pass@k: share of items with at least one correct sample among their k samples."""
    if not samples_correct:
        return 0.0
    return sum(1 for row in samples_correct if any(row)) / len(samples_correct)


def pass_at_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``n`` samples with ``c`` correct (Chen et al., 2021)."""
    if not 0 <= c <= n or k <= 0:
        raise ValueError(f"need 0 <= c <= n and k > 0, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(samples_correct: Sequence[Sequence[bool]], k: int) -> float:
    """Mean unbiased pass@k over items, each with its own samples (at least ``k`` each)."""
    if not samples_correct:
        return 0.0
    return sum(pass_at_k_unbiased(len(r), sum(bool(x) for x in r), k) for r in samples_correct) / len(
        samples_correct
    )
