"""Helpers every task's rewards share: completion text, dataset columns, finite values, names, guards.

Reward functions follow TRL's convention ``f(prompts, completions, **columns) -> list[float]``; model
output is untrusted, so these helpers never raise on it. (The SVG render sandbox keeps its own copy of
:func:`completion_text` in ``svg/extract.py`` because its worker processes must not import r1vision.)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., list[float]]


_MAX_PARTS = 1_000_000  # nodes visited in one completion; bounds hostile or cyclic structures


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, a message list, a message dict or a list of content parts.

    Iterative, so a structure nested past the recursion limit (or a cyclic one) cannot raise: containers
    already seen are skipped and at most ``_MAX_PARTS`` nodes are visited.
    """
    if isinstance(completion, str):
        return completion
    parts: list[str] = []
    stack: list[Any] = [completion]
    seen: set[int] = set()
    visited = 0
    while stack and visited < _MAX_PARTS:
        item = stack.pop()
        visited += 1
        if item is None:
            continue
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                if "content" in item:
                    stack.append(item["content"])
                elif item.get("type") == "text":
                    stack.append(str(item.get("text") or ""))
            else:
                stack.extend(reversed(item))
        else:
            try:
                parts.append(str(item))
            except Exception:  # noqa: BLE001 - a hostile __str__ must not crash a reward
                continue
    return "".join(parts)


def column(kwargs: dict[str, Any], name: str, n: int) -> list[Any]:
    """Column ``name`` of the batch as a list of ``n`` values.

    A missing column gives ``None`` per row, a scalar (or a string) is repeated, a short list is padded
    with ``None``: rewards then judge each row without index errors.
    """
    values = kwargs.get(name)
    if values is None or isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        return [values] * n
    values = list(values)
    return values + [None] * (n - len(values)) if len(values) < n else values


def finite(value: Any, default: float = 0.0) -> float:
    """``value`` as a float, or ``default`` when it is not a finite number."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return float(default)
    return v if math.isfinite(v) else float(default)


def unit(value: Any) -> float:
    """``value`` clipped to [0, 1]; anything that is not a finite number scores 0."""
    return min(max(finite(value, 0.0), 0.0), 1.0)


def named(func: RewardFunc, name: str) -> RewardFunc:
    """Give a reward closure the name TRL logs it under (``rewards/<name>/mean``)."""
    func.__name__ = name
    func.__qualname__ = name
    return func


_OPEN, _CLOSE = "<answer>", "</answer>"
_SCAN = 4096  # model text is untrusted: only its start is searched


def extract_answer(text: str) -> str | None:
    """The lower-cased text inside the first ``<answer>…</answer>`` holding at most 64 characters and no
    ``<``, or ``None``. Plain ``str.find`` scans of the first 4096 characters (a regex with two ``\\s*``
    around a lazy group backtracked quadratically on a tag followed by spaces: 1.4 s)."""
    head = text[:_SCAN]
    lower = head.lower()
    start = lower.find(_OPEN)
    while start >= 0:
        end = lower.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            return None
        inner = head[start + len(_OPEN) : end].strip()
        if "<" not in inner and len(inner) <= 64:
            return inner.lower()
        start = lower.find(_OPEN, start + 1)
    return None
