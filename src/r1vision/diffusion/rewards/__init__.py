"""Rewards for text-to-image GRPO, registered in the one reward registry (:mod:`r1vision.rewards`, kind
``"image"``): callables ``f(prompts, images, **columns) -> list[float | None]`` with the range they declare.

By name (``--reward_funcs ocr brightness``): ``ocr`` (Flow-GRPO scoring) and ``ocr_strict`` (no substring
credit), both in [0, 1]; ``brightness``, ``prompt_brightness``, ``redness``, ``blueness``, ``position`` in
[0, 1]; model-based ones built from a local path in ``reward_options`` (``{"clip_score": {"path": "..."}}``):
``clip_score`` in [0, 1], ``pickscore`` in [-4, 4] (Flow-GRPO's ``exp(logit_scale) * cos / 26``),
``aesthetic`` in [-1, 2] (the LAION predictor's score / 10, loosely bounded); anything else is a dotted path
``my_module.fn`` or a name registered with ``r1vision.rewards.register_reward(..., kind="image")``. ``None``
means "no signal for this sample" (it becomes NaN and is skipped by the weighted sum).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from r1vision import rewards
from r1vision.diffusion.rewards.image_stats import blueness, brightness, position, prompt_brightness, redness
from r1vision.diffusion.rewards.ocr import OCRReward, ocr_score, target_text
from r1vision.diffusion.rewards.scorers import AestheticScore, CLIPScore, pickscore

ImageReward = Callable[..., list]


def _clip_score(**options: Any) -> ImageReward:

    return CLIPScore(**options)


def _pickscore(**options: Any) -> ImageReward:

    return pickscore(**options)


def _aesthetic(**options: Any) -> ImageReward:

    return AestheticScore(**options)


for _name, _func in (
    ("brightness", brightness),
    ("prompt_brightness", prompt_brightness),
    ("redness", redness),
    ("blueness", blueness),
    ("position", position),
):
    rewards.register_reward(_name, _func, kind="image")
rewards.register_reward("ocr", factory=lambda **kw: OCRReward(**kw), kind="image")
rewards.register_reward(
    "ocr_strict", factory=lambda **kw: OCRReward(**{"mode": "strict", **kw}), kind="image"
)
rewards.register_reward("clip_score", factory=_clip_score, kind="image")
rewards.register_reward("pickscore", factory=_pickscore, kind="image", low=-4.0, high=4.0)
rewards.register_reward("aesthetic", factory=_aesthetic, kind="image", low=-1.0, high=2.0)


def resolve_reward(name: str, options: Mapping[str, Any] | None = None) -> ImageReward:
    """The image reward ``name`` (see the module docstring) built with ``options``, held to its range."""
    (spec,) = rewards.guarded(rewards.resolve([name], "image", options={name: dict(options or {})}))
    return spec.func


def reward_names() -> list[str]:
    return rewards.registered("image")


__all__ = ["OCRReward", "ocr_score", "target_text", "resolve_reward", "reward_names"]
