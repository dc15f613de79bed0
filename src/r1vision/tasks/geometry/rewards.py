"""Reward functions of the geometry task (TRL convention ``f(prompts, completions, **columns)``).

- ``accuracy``: 1.0 when the completion's final answer matches the row's ``solution`` (else ``answer``).
- ``format``: 1.0 when ``<think>`` occurs exactly once (and, by default, is closed once after it).
- ``language``: minus the share of Chinese characters (CJK ideographs) in the completion, in [-1, 0]
  (MAYE's language reward is -0.1 times that share: weight 0.1).
- ``no_eos``: -1.0 for a completion cut at the token limit without an EOS token, else 0.0. With
  ``no_eos_replaces`` the other rewards give 0 for such a completion, so its score *is* the penalty
  (MAYE replaces the score of a response without EOS by -0.1: weight 0.1).

Each is weighted by :func:`make_rewards`. None of them raises or hangs on model text; the runners also hold
each to its declared range (:func:`r1vision.tasks.base.guarded_rewards`).
"""

from __future__ import annotations

import logging
import math
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
# str.translate with a deletion table counts in C: ~20x faster than a regex findall on long outputs.
_DROP_CJK = dict.fromkeys(range(0x4E00, 0xA000))
# A completion is bounded by max_completion_length in training; the cap bounds untrusted text elsewhere.
_SHARE_CAP = 100_000


def chinese_share(text: str) -> float:
    """The share of CJK unified ideographs (U+4E00..U+9FFF) among the characters of ``text``, 0.0 when
    empty; texts over 100k characters are measured on their first 100k."""
    text = text[:_SHARE_CAP]
    return (len(text) - len(text.translate(_DROP_CJK))) / len(text) if text else 0.0


def make_language_reward() -> Callable[..., list[float]]:
    """MAYE's language reward with weight 1: minus the share of Chinese characters, in [-1, 0]. Proportional:
    a Chinese word in an English solution costs little, a Chinese solution almost the whole weight."""

    def language(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [-chinese_share(completion_text(c)) for c in completions]

    language.__name__ = "language"
    return language


def truncated(
    kwargs: dict[str, Any], n: int, eos_ids: set[int], max_completion_length: int | None
) -> list[bool]:
    """Per completion, whether it was cut without an EOS token, from TRL's ``completion_ids`` column.

    With ``max_completion_length``, a completion is cut when it reached that length and its last token is not
    an EOS id (right whether or not the generator keeps the EOS in the ids); without it, when it holds no EOS
    id at all. Rows without ``completion_ids`` count as not cut.
    """
    out = []
    for ids in _column(kwargs, "completion_ids", n):
        try:
            ids = [int(t) for t in ids] if ids is not None else None
        except (TypeError, ValueError):
            ids = None
        if ids is None:
            out.append(False)
        elif max_completion_length is not None:
            out.append(len(ids) >= max_completion_length and (not ids or ids[-1] not in eos_ids))
        else:
            out.append(not eos_ids.intersection(ids))
    return out


def _eos_set(eos_token_id: int | Iterable[int]) -> set[int]:
    eos_ids = {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(t) for t in eos_token_id}
    if not eos_ids:
        raise ValueError("the no-EOS penalty needs at least one EOS token id")
    return eos_ids


def make_no_eos_penalty(
    eos_token_id: int | Iterable[int], max_completion_length: int | None = None
) -> Callable[..., list[float]]:
    """Penalty for completions without EOS: -1.0 when cut (:func:`truncated`), else 0.0."""
    eos_ids = _eos_set(eos_token_id)

    def no_eos(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [
            -1.0 if cut else 0.0
            for cut in truncated(kwargs, len(completions), eos_ids, max_completion_length)
        ]

    no_eos.__name__ = "no_eos"
    return no_eos


def zero_when_truncated(
    func: Callable[..., list[float]], eos_token_id: int | Iterable[int], max_completion_length: int | None
) -> Callable[..., list[float]]:
    """``func`` with 0.0 for the completions cut without EOS (MAYE's score replacement, with ``no_eos``)."""
    eos_ids = _eos_set(eos_token_id)

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        values = func(prompts, completions, **kwargs)
        cut = truncated(kwargs, len(completions), eos_ids, max_completion_length)
        return [0.0 if c else v for v, c in zip(values, cut, strict=True)]

    reward.__name__ = func.__name__
    return reward


def make_rewards(
    accuracy_weight: float = 1.0,
    format_weight: float = 0.0,
    language_weight: float = 0.0,
    no_eos_weight: float = 1.0,
    eos_token_id: int | Iterable[int] | None = None,
    max_completion_length: int | None = None,
    require_close_think: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
    no_eos_replaces: bool = False,
) -> list[RewardSpec]:
    """The geometry rewards with their weights and ranges.

    ``accuracy``, ``format`` and ``language`` are always returned (a zero weight still logs the value);
    ``no_eos`` only when ``eos_token_id`` is given, since it cannot work without it. ``no_eos_replaces``: the
    other rewards give 0 for a completion cut without EOS, so its weighted score is ``-no_eos_weight``.
    """
    funcs = [
        ("accuracy", make_accuracy_reward(timeout, max_completion_length), accuracy_weight, 0.0, 1.0),
        ("format", make_format_reward(require_close_think), format_weight, 0.0, 1.0),
        ("language", make_language_reward(), language_weight, -1.0, 0.0),
    ]
    if no_eos_replaces and eos_token_id is None:
        raise ValueError("no_eos_replaces needs the end-of-sequence ids (the runner passes them)")
    if no_eos_replaces:
        funcs = [
            (n, zero_when_truncated(f, eos_token_id, max_completion_length), w, lo, hi)
            for n, f, w, lo, hi in funcs
        ]
    specs = [RewardSpec(*f) for f in funcs]
    if eos_token_id is not None:
        penalty = make_no_eos_penalty(eos_token_id, max_completion_length)
        specs.append(RewardSpec("no_eos", penalty, no_eos_weight, -1.0, 0.0))
    return specs
