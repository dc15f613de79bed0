"""SVG figure generation: image -> SVG code, rendered in a sandbox and scored against the figure.

``render(svg, width, height)`` is the public rendering entry point (never raises); the task class lives in
:mod:`r1vision.tasks.svg.task`. Heavy submodules (rewards, judge, data) import on first attribute access, and
render workers load only ``worker``, ``extract``, ``sanitize`` and ``score``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .extract import completion_text, extract_svg, find_svg
from .render import RenderPool, RenderResult, configure_default_pool, default_pool, render, render_many
from .sanitize import Sanitized, SanitizeLimits, sanitize

_LAZY = {
    "SVGTask": "task",
    "draw_contact_sheet": "evaluate",
    "SVGScorer": "rewards",
    "make_rewards": "rewards",
    "JudgeConfig": "judge",
    "VLMJudge": "judge",
    "load_svg_dataset": "data",
}

__all__ = [
    "RenderPool",
    "RenderResult",
    "SanitizeLimits",
    "Sanitized",
    "completion_text",
    "configure_default_pool",
    "default_pool",
    "extract_svg",
    "find_svg",
    "render",
    "render_many",
    "sanitize",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
