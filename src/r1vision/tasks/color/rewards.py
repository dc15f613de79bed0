"""Rewards of the ``color`` task (TRL convention: ``f(prompts, completions, **columns) -> list[float]``)."""

from __future__ import annotations

import re
from typing import Any

from r1vision.tasks.common import completion_text

_ANSWER = re.compile(r"<answer>\s*([^<]{0,64}?)\s*</answer>", re.IGNORECASE | re.DOTALL)


def extract_answer(text: str) -> str | None:
    """The lower-cased text inside ``<answer>…</answer>``, or ``None``."""
    match = _ANSWER.search(text[:4096])  # bounded: model text is untrusted
    return match.group(1).strip().lower() if match else None


def color_accuracy(prompts: list, completions: list, answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 when the answer tag names the ground-truth colour, else 0.0. Range [0, 1]."""
    out = []
    for completion, gt in zip(completions, answer, strict=False):
        predicted = extract_answer(completion_text(completion))
        out.append(1.0 if predicted is not None and predicted == str(gt).lower() else 0.0)
    return out


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
