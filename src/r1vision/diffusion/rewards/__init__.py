"""Rewards for text-to-image GRPO: callables ``f(prompts, images, **columns) -> list[float | None]``.

By name (``--reward_funcs ocr brightness``): ``ocr`` (Flow-GRPO scoring), ``ocr_strict`` (no substring
credit), ``brightness``, ``prompt_brightness``, ``redness``, ``blueness``, ``position``; model-based ones
take a local path in ``reward_options`` (``{"clip_score": {"path": "..."}}``, ``pickscore``, ``aesthetic``);
anything else is a dotted path ``my_module.fn`` or a name registered with :func:`register_reward`.
``None`` means "no signal for this sample" (it becomes NaN and is skipped by the weighted sum).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from r1vision.diffusion.rewards.image_stats import blueness, brightness, position, prompt_brightness, redness
from r1vision.diffusion.rewards.ocr import OCRReward, ocr_score, target_text

ImageReward = Callable[..., list]

_FACTORIES: dict[str, Callable[..., ImageReward]] = {
    "ocr": lambda **kw: OCRReward(**kw),
    "ocr_strict": lambda **kw: OCRReward(**{"mode": "strict", **kw}),
    "brightness": lambda **kw: brightness,
    "prompt_brightness": lambda **kw: prompt_brightness,
    "redness": lambda **kw: redness,
    "blueness": lambda **kw: blueness,
    "position": lambda **kw: position,
}


def _model_rewards() -> dict[str, Callable[..., ImageReward]]:
    from r1vision.diffusion.rewards.scorers import AestheticScore, CLIPScore, pickscore

    return {"clip_score": CLIPScore, "pickscore": pickscore, "aesthetic": AestheticScore}


def register_reward(name: str, factory: Callable[..., ImageReward]) -> None:
    """Make ``name`` usable in ``--reward_funcs``; ``factory(**options)`` returns the callable."""
    _FACTORIES[name] = factory


def reward_names() -> list[str]:
    return sorted([*_FACTORIES, "clip_score", "pickscore", "aesthetic"])


def resolve_reward(name: str, options: dict[str, Any] | None = None) -> ImageReward:
    """The reward ``name`` (see the module docstring) built with ``options``."""
    options = dict(options or {})
    if name in _FACTORIES:
        return _FACTORIES[name](**options)
    models = {"clip_score", "pickscore", "aesthetic"}
    if name in models:
        return _model_rewards()[name](**options)
    if "." in name:
        module, _, attr = name.rpartition(".")
        try:
            func = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"reward {name!r}: cannot import it ({exc})") from None
        return func(**options) if options else func
    raise ValueError(
        f"unknown reward {name!r}; use one of {', '.join(reward_names())} or a dotted path module.fn"
    )


__all__ = ["OCRReward", "ocr_score", "target_text", "resolve_reward", "register_reward", "reward_names"]
