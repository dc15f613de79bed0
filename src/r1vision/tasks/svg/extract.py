"""Find the SVG document inside a model completion.

Completions arrive as plain strings or as TRL conversational lists (``[{"role": "assistant", "content": ...}]``
where ``content`` is a string or a list of ``{"type": "text", "text": ...}`` parts). The SVG is the first
``<svg …>`` element up to its *matching* ``</svg>`` (nested ``<svg>`` elements are balanced), wherever it sits:
Markdown fences, prose before or after and an XML prolog are all ignored. Everything here is one
linear-time pass, safe on hostile text (benchmarks and ``tests/tasks/svg/test_extract.py``).
"""

from __future__ import annotations

import re
from typing import Any

# `<svg` followed by whitespace, `>` or `/` (so `<svgfoo>` is not an SVG), with an optional namespace prefix.
_OPEN_OR_CLOSE = re.compile(r"<(/?)(?:[A-Za-z_][\w.-]*:)?svg(?=[\s>/])", re.IGNORECASE)
_OPEN = re.compile(r"<(?:[A-Za-z_][\w.-]*:)?svg(?=[\s>/])", re.IGNORECASE)
MAX_NESTED_SVG = 256


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a message list, a message dict or a list of content parts.

    Iterative (a list nested past the recursion limit is just text to skip, not a ``RecursionError``).
    """
    parts: list[str] = []
    stack = [completion]
    while stack:
        item = stack.pop()
        if item is None:
            continue
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict):
            if "content" in item:
                stack.append(item["content"])
            elif item.get("type") == "text":
                parts.append(str(item.get("text") or ""))
        elif isinstance(item, (list, tuple)):
            # A message list: the assistant turns; a content-part list: the text parts (in order).
            stack.extend(reversed(item))
        else:
            parts.append(str(item))
    return "".join(parts)


def find_svg(text: str) -> tuple[str | None, str | None]:
    """``(svg, None)`` for the first complete ``<svg>`` element, else ``(None, reason)``.

    ``reason`` is ``"no_svg"`` when no ``<svg`` tag appears, ``"truncated"`` when the first one is never
    closed (typically a completion cut at ``max_completion_length``) and ``"too_large"`` when ``<svg>``
    elements nest deeper than ``MAX_NESTED_SVG``.

    One left-to-right pass: the end of each tag is the next ``>``, and because tags are visited in order,
    the position of that ``>`` only moves forward (it is looked up again only once a tag starts past it).
    Thousands of unclosed ``<svg `` tokens therefore cost one scan, not one scan each.
    """
    if not isinstance(text, str):
        return None, "no_svg"
    first = _OPEN.search(text)  # stray `</svg>` before any opening tag are skipped at regex speed
    if first is None:
        return None, "no_svg"
    gt = -1  # position of the next `>` at or after the current tag, -1 before the first lookup
    depth = 0
    start = 0
    for match in _OPEN_OR_CLOSE.finditer(text, first.start()):
        if depth == 0 and match.group(1):  # a stray `</svg>` between two documents
            continue
        if depth > MAX_NESTED_SVG:  # nobody nests <svg> this deep; the sanitizer would refuse it anyway
            return None, "too_large"
        if gt < match.end():
            gt = text.find(">", match.end())
            if gt < 0:  # no `>` anywhere after this tag: nothing after it can close either
                return None, "truncated"
        self_closing = text[gt - 1] == "/"
        if depth == 0:
            start = match.start()
            if self_closing:
                return text[start : gt + 1], None
            depth = 1
        elif match.group(1):
            depth -= 1
            if depth == 0:
                return text[start : gt + 1], None
        elif not self_closing:
            depth += 1
    return (None, "no_svg") if depth == 0 else (None, "truncated")


def extract_svg(completion: Any) -> str | None:
    """The first complete SVG element in ``completion`` (any TRL completion shape), or ``None``."""
    svg, _ = find_svg(completion_text(completion))
    return svg
