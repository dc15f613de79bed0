"""Reward functions of the geometry task (TRL convention ``f(prompts, completions, **columns)``).

- ``accuracy``: 1.0 when the completion's final answer matches the row's ``solution`` (else ``answer``).
- ``format``: 1.0 when ``<think>`` occurs exactly once (and, by default, is closed once after it).
- ``language``: -1.0 when a completion mixes writing systems (e.g. Latin and Chinese), else 0.0.
- ``no_eos``: -1.0 for a completion cut at the token limit without an EOS token, else 0.0.

Each is weighted by :func:`make_rewards`. None of them raises or hangs on model text; the runners also hold
each to its declared range (:func:`r1vision.tasks.base.guarded_rewards`).
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from r1vision.tasks.base import RewardSpec
from r1vision.tasks.common import column as _column
from r1vision.tasks.common import completion_text
from r1vision.tasks.geometry.extract import parse_choices
from r1vision.tasks.geometry.metrics import generation_step_metrics
from r1vision.tasks.geometry.verify import DEFAULT_TIMEOUT_S, answers_match_batch

logger = logging.getLogger(__name__)


def make_accuracy_reward(
    timeout: float = DEFAULT_TIMEOUT_S, max_completion_length: int | None = None
) -> Callable[..., list[float]]:
    """Accuracy reward: 1.0/0.0 via :func:`answers_match` against ``solution`` (fallback ``answer``).

    Multiple-choice rows are recognised by a ``choices`` column, or by options listed in ``question``.
    When the trainer passes ``log_metric`` (TRL does), it also logs MAYE's per-generation-step metrics
    (``maye/*``: response length, clip ratio at ``max_completion_length``, reflection ratios and word
    counts) from the verdicts it has just computed, so they land in ``metrics.csv`` at no extra cost.
    """

    def accuracy(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        solutions, answers = _column(kwargs, "solution", n), _column(kwargs, "answer", n)
        choices, questions = _column(kwargs, "choices", n), _column(kwargs, "question", n)
        texts = [completion_text(c) for c in completions]
        pair_text, pair_ref, pair_opt, owner = [], [], [], []
        for i, text in enumerate(texts):
            reference = solutions[i] if solutions[i] not in (None, "") else answers[i]
            option = choices[i] if isinstance(choices[i], (list, tuple)) and choices[i] else None
            if option is None and isinstance(questions[i], str):
                option = parse_choices(questions[i])
            # a list is the set of accepted answers (never its repr); no reference never matches
            for ref in _references(reference):
                pair_text.append(text)
                pair_ref.append(ref)
                pair_opt.append(option)
                owner.append(i)
        verdicts = [False] * n
        for i, ok in zip(
            owner, answers_match_batch(pair_text, pair_ref, pair_opt, timeout=timeout), strict=True
        ):
            verdicts[i] = verdicts[i] or ok
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            ids = kwargs.get("completion_ids")
            lengths = [len(x) for x in ids] if ids is not None else None
            for name, value in generation_step_metrics(
                texts, verdicts, lengths, max_completion_length
            ).items():
                log_metric(f"maye/{name}", value)
        return [1.0 if ok else 0.0 for ok in verdicts]

    accuracy.__name__ = "accuracy"
    return accuracy


def _references(reference: Any) -> list[str]:
    """The reference answers of a row: a string, a number, or each string/number of a list of them."""
    items = reference if isinstance(reference, (list, tuple)) else [reference]
    out = []
    for item in items[:16]:
        if isinstance(item, str) and item.strip():
            out.append(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
            out.append(str(item))
    return out


def make_format_reward(require_close: bool = True) -> Callable[..., list[float]]:
    """Format reward: 1.0 when ``<think>`` occurs exactly once (and ``</think>`` once after it)."""

    def format(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:  # noqa: A001
        rewards = []
        for completion in completions:
            text = completion_text(completion)
            ok = text.count("<think>") == 1
            if ok and require_close:
                ok = text.count("</think>") == 1 and text.index("<think>") < text.index("</think>")
            rewards.append(1.0 if ok else 0.0)
        return rewards

    format.__name__ = "format"
    return format


# Scripts a reasoning trace might drift into. Greek and symbols are deliberately absent: maths uses them.
_SCRIPT_PREFIXES = {
    "LATIN": "latin",
    "CJK": "cjk",
    "HIRAGANA": "cjk",
    "KATAKANA": "cjk",
    "HANGUL": "hangul",
    "CYRILLIC": "cyrillic",
    "ARABIC": "arabic",
    "HEBREW": "hebrew",
    "DEVANAGARI": "devanagari",
    "THAI": "thai",
}


# Letters looked at per completion: a 2,048-token completion is ~10 k characters; the cap bounds the cost
# of a hostile 1 MB one (each distinct non-ASCII character costs a Unicode-name lookup).
MAX_LANGUAGE_CHARS = 100_000


def scripts_used(text: str, min_chars: int = 1) -> set[str]:
    """Writing systems with at least ``min_chars`` letters in ``text`` (``latin``, ``cjk``, ...).

    Counts each distinct character once (``collections.Counter`` runs in C) in the first
    :data:`MAX_LANGUAGE_CHARS` characters.
    """
    counts: dict[str, int] = {}
    for ch, n in Counter(text[:MAX_LANGUAGE_CHARS]).items():
        if ch.isascii():
            if ch.isalpha():
                counts["latin"] = counts.get("latin", 0) + n
            continue
        if not (ch.isalpha() or unicodedata.category(ch) == "Lo"):
            continue
        name = unicodedata.name(ch, "")
        script = next((s for prefix, s in _SCRIPT_PREFIXES.items() if name.startswith(prefix)), None)
        if script:
            counts[script] = counts.get(script, 0) + n
    return {s for s, c in counts.items() if c >= min_chars}


def make_language_reward(min_chars: int = 1) -> Callable[..., list[float]]:
    """Language-mixing penalty: -1.0 when two or more writing systems each have ``min_chars`` letters."""

    def language(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [-1.0 if len(scripts_used(completion_text(c), min_chars)) > 1 else 0.0 for c in completions]

    language.__name__ = "language"
    return language


def make_no_eos_penalty(
    eos_token_id: int | Iterable[int], max_completion_length: int | None = None
) -> Callable[..., list[float]]:
    """Penalty for completions without EOS: -1.0 when truncated, else 0.0.

    Reads TRL's ``completion_ids`` keyword (one token-id list per completion). With
    ``max_completion_length``, a completion counts as truncated when it reached that length and its last
    token is not an EOS id, which is right whether or not the generator keeps the EOS in the ids. Without
    it, a completion that contains no EOS id at all is penalised. Rows without ``completion_ids`` get 0.0.
    """
    eos_ids = {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}
    if not eos_ids:
        raise ValueError("make_no_eos_penalty needs at least one EOS token id")

    def no_eos(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        ids_list = _column(kwargs, "completion_ids", len(completions))
        rewards = []
        for ids in ids_list:
            try:
                ids = [int(t) for t in ids] if ids is not None else None
            except (TypeError, ValueError):
                ids = None
            if ids is None:
                rewards.append(0.0)
            elif max_completion_length is not None:
                truncated = len(ids) >= max_completion_length and (not ids or ids[-1] not in eos_ids)
                rewards.append(-1.0 if truncated else 0.0)
            else:
                rewards.append(0.0 if eos_ids.intersection(ids) else -1.0)
        return rewards

    no_eos.__name__ = "no_eos"
    return no_eos


def make_rewards(
    accuracy_weight: float = 1.0,
    format_weight: float = 0.0,
    language_weight: float = 0.0,
    no_eos_weight: float = 1.0,
    eos_token_id: int | Iterable[int] | None = None,
    max_completion_length: int | None = None,
    require_close_think: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[RewardSpec]:
    """The geometry rewards with their weights and ranges.

    ``accuracy``, ``format`` and ``language`` are always returned (a zero weight still logs the value);
    ``no_eos`` only when ``eos_token_id`` is given, since it cannot work without it.
    """
    specs = [
        RewardSpec(
            "accuracy", make_accuracy_reward(timeout, max_completion_length), accuracy_weight, 0.0, 1.0
        ),
        RewardSpec("format", make_format_reward(require_close_think), format_weight, 0.0, 1.0),
        RewardSpec("language", make_language_reward(), language_weight, -1.0, 0.0),
    ]
    if eos_token_id is not None:
        penalty = make_no_eos_penalty(eos_token_id, max_completion_length)
        specs.append(RewardSpec("no_eos", penalty, no_eos_weight, -1.0, 0.0))
    return specs
