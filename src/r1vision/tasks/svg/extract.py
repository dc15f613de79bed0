"""Find the SVG document inside a model completion.

Completions arrive as plain strings or as TRL conversational lists (``[{"role": "assistant", "content": ...}]``
where ``content`` is a string or a list of ``{"type": "text", "text": ...}`` parts). The SVG is the first
``<svg …>`` element up to its *matching* ``</svg>`` (nested ``<svg>`` elements are balanced), wherever it sits:
Markdown fences, prose before or after and an XML prolog are all ignored. Everything here is linear-time
regex scanning, safe on hostile text.
"""

from __future__ import annotations

import re
from typing import Any

# `<svg` followed by whitespace, `>` or `/` (so `<svgfoo>` is not an SVG), with an optional namespace prefix.
_OPEN_OR_CLOSE = re.compile(r"<(/?)(?:[A-Za-z_][\w.-]*:)?svg(?=[\s>/])", re.IGNORECASE)
_TAG_END = re.compile(r"(/?)>")


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a message list, a message dict or a list of content parts."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        if "content" in completion:
            return completion_text(completion["content"])
        if completion.get("type") == "text":
            return str(completion.get("text") or "")
        return ""
    if isinstance(completion, (list, tuple)):
        # A message list: the assistant turns; a content-part list: the text parts.
        return "".join(completion_text(item) for item in completion)
    return str(completion)


def find_svg(text: str) -> tuple[str | None, str | None]:
    """``(svg, None)`` for the first complete ``<svg>`` element, else ``(None, reason)``.

    ``reason`` is ``"no_svg"`` when no ``<svg`` tag appears and ``"truncated"`` when the first one is never
    closed (typically a completion cut at ``max_completion_length``).
    """
    first = _OPEN_OR_CLOSE.search(text)
    while first is not None and first.group(1):  # a stray `</svg>` before any opening tag
        first = _OPEN_OR_CLOSE.search(text, first.end())
    if first is None:
        return None, "no_svg"
    start = first.start()
    end_of_open = _TAG_END.search(text, first.end())
    if end_of_open is None:
        return None, "truncated"
    if end_of_open.group(1):  # self-closing `<svg ... />`
        return text[start : end_of_open.end()], None
    depth = 1
    pos = end_of_open.end()
    for match in _OPEN_OR_CLOSE.finditer(text, pos):
        tag_end = _TAG_END.search(text, match.end())
        if tag_end is None:
            return None, "truncated"
        if match.group(1):
            depth -= 1
        elif not tag_end.group(1):
            depth += 1
        if depth == 0:
            return text[start : tag_end.end()], None
    return None, "truncated"


def extract_svg(completion: Any) -> str | None:
    """The first complete SVG element in ``completion`` (any TRL completion shape), or ``None``."""
    svg, _ = find_svg(completion_text(completion))
    return svg
