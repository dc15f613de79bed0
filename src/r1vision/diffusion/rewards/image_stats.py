"""Image-statistics rewards: cheap, exact, and learnable by a tiny pixel-space model on a CPU.

``brightness``: mean luminance. ``prompt_brightness``: the luminance for a prompt that says "bright" and
1 - luminance for one that says "dark" (the demo's prompt-conditioned task). ``redness``/``blueness``: how
much one channel dominates. ``position``: the share of the image's ink (distance from its mean colour) in the
half the prompt names ("left"/"right"/"top"/"bottom").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _array(image: Any) -> np.ndarray:
    return np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0


def _luminance(image: Any) -> float:
    a = _array(image)
    return float((0.299 * a[..., 0] + 0.587 * a[..., 1] + 0.114 * a[..., 2]).mean())


def brightness(prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float]:
    """Mean luminance in [0, 1]."""
    return [_luminance(im) for im in images]


def prompt_brightness(prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """Luminance when the prompt says "bright", its complement when it says "dark", else None."""
    out: list[float | None] = []
    for prompt, image in zip(prompts, images, strict=True):
        words = str(prompt).lower()
        lum = _luminance(image)
        out.append(lum if "bright" in words else 1.0 - lum if "dark" in words else None)
    return out


def _channel(index: int):
    def reward(prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float]:
        out = []
        for image in images:
            a = _array(image)
            others = np.delete(a, index, axis=-1).mean(axis=-1)
            out.append(float(np.clip((a[..., index] - others).mean() * 0.5 + 0.5, 0.0, 1.0)))
        return out

    return reward


redness = _channel(0)
redness.__name__ = "redness"
blueness = _channel(2)
blueness.__name__ = "blueness"


def position(prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """Share of the image's ink in the half the prompt names; None when it names none."""
    out: list[float | None] = []
    for prompt, image in zip(prompts, images, strict=True):
        a = _array(image)
        ink = np.abs(a - a.reshape(-1, 3).mean(axis=0)).sum(axis=-1)
        total = float(ink.sum()) or 1.0
        h, w = ink.shape
        words = str(prompt).lower()
        halves = {
            "left": ink[:, : w // 2],
            "right": ink[:, w - w // 2 :],
            "top": ink[: h // 2],
            "bottom": ink[h - h // 2 :],
        }
        side = next((k for k in halves if k in words.split() or f" {k}" in words), None)
        out.append(None if side is None else float(halves[side].sum()) / total)
    return out
