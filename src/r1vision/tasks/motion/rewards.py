"""Rewards of the ``motion`` task (TRL convention: ``f(prompts, completions, **columns) -> list[float]``).

Multiple choice as Video-R1 scores it: the letter inside ``<answer>`` must equal the solution's letter.
"""

from __future__ import annotations

import re
from typing import Any

from r1vision.tasks.common import column, completion_text, extract_answer

_ONLY_ANSWER = re.compile(r"<answer>\s*[A-Za-z]\s*</answer>")


def motion_accuracy(prompts: list, completions: list, answer: Any = None, **kwargs: Any) -> list[float]:
    """1.0 when the answer tag holds the right option letter (case-insensitive), else 0.0. Range [0, 1]."""
    answers = column({"answer": answer}, "answer", len(completions))
    out = []
    for completion, gt in zip(completions, answers, strict=False):
        predicted = extract_answer(completion_text(completion))
        right = (
            isinstance(gt, str) and predicted is not None and predicted.strip().upper() == gt.strip().upper()
        )
        out.append(1.0 if right else 0.0)
    return out


def motion_format(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    """1.0 for exactly ``<answer>LETTER</answer>``, 0.5 for an answer tag among other text, else 0.0."""
    out = []
    for completion in completions:
        text = completion_text(completion).strip()
        if _ONLY_ANSWER.fullmatch(text):
            out.append(1.0)
        else:
            out.append(0.5 if extract_answer(text) is not None else 0.0)
    return out
