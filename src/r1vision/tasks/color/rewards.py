"""Rewards of the ``color`` task (TRL convention: ``f(prompts, completions, **columns) -> list[float]``)."""

from __future__ import annotations

import logging
import re
from typing import Any

from r1vision.tasks.common import column, completion_text, extract_answer

logger = logging.getLogger(__name__)


def _accepted(gt: Any) -> set[str]:
    """The answers a row accepts: its colour name, or each name of a list of them (never the list's repr)."""
    if isinstance(gt, str):
        return {gt.strip().lower()}
    if isinstance(gt, (list, tuple, set, frozenset)):
        return {g.strip().lower() for g in gt if isinstance(g, str)}
    return set()


def color_accuracy(prompts: list, completions: list, answer: Any = None, **kwargs: Any) -> list[float]:
    """1.0 when the answer tag names the ground-truth colour (or one of a list of them), else 0.0. Range [0, 1].

    A dataset without an ``answer`` column scores 0 (and logs once): a reward never raises.
    """
    if answer is None:
        _warn_once("color accuracy: the dataset has no 'answer' column; every completion scores 0")
    answers = column({"answer": answer}, "answer", len(completions))
    out = []
    for completion, gt in zip(completions, answers, strict=False):
        predicted = extract_answer(completion_text(completion))
        out.append(1.0 if predicted is not None and predicted in _accepted(gt) else 0.0)
    return out


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


def color_format(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion is exactly one ``<answer>word</answer>``, 0.5 when it has the tag among other text,
    else 0.0. Range [0, 1]."""
    out = []
    for completion in completions:
        text = completion_text(completion).strip()
        if re.fullmatch(r"<answer>\s*[A-Za-z]+\s*</answer>", text):
            out.append(1.0)
        elif extract_answer(text) is not None:
            out.append(0.5)
        else:
            out.append(0.0)
    return out
