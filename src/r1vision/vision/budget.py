"""The pixel budget: one rule for the size every image is resized to, used by GRPO, SFT, inference and vLLM.

Qwen-VL vision towers cut images into ``patch_size`` patches and merge ``merge_size``² of them into one
token, so both sides must be multiples of ``factor = patch_size * merge_size`` (28 for Qwen2/2.5-VL,
32 for Qwen3-VL) and the area must lie in ``[min_pixels, max_pixels]``. We resize images ourselves with
:func:`resized_size` *before* the processor sees them, and give the processor the same budget, so its own
resize is a no-op and the size a reward function sees is exactly the size the model saw.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r1vision import hub
from r1vision.vision.family import FAMILIES

__all__ = [
    "PixelBudget",
    "apply_budget_to_processor",
    "processor_pixels",
    "resized_size",
    "resolve_budget",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PixelBudget:
    """Minimum and maximum pixel area of an image after resizing, and the side multiple ``factor``."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    factor: int = 28

    def __post_init__(self) -> None:
        if self.min_pixels <= 0 or self.max_pixels < self.min_pixels:
            raise ValueError(
                f"invalid pixel budget: min_pixels={self.min_pixels}, max_pixels={self.max_pixels} "
                "(need 0 < min_pixels <= max_pixels)"
            )
        if self.max_pixels < self.factor * self.factor:
            raise ValueError(f"max_pixels={self.max_pixels} is below one {self.factor}x{self.factor} token")

    @classmethod
    def for_family(
        cls, family: str, min_pixels: int | None = None, max_pixels: int | None = None
    ) -> PixelBudget:
        """Budget with the family's factor; ``None`` keeps the defaults."""
        factor = FAMILIES[family].factor if family in FAMILIES else 28
        kwargs = {"factor": factor}
        if min_pixels is not None:
            kwargs["min_pixels"] = min_pixels
        if max_pixels is not None:
            kwargs["max_pixels"] = max_pixels
        return cls(**kwargs)

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) an image of this size is resized to."""
        return resized_size(width, height, self.min_pixels, self.max_pixels, self.factor)

    def num_tokens(self, width: int, height: int) -> int:
        """Number of image placeholder tokens for an image of this original size."""
        w, h = self.resized_size(width, height)
        return (w // self.factor) * (h // self.factor)


def resized_size(
    width: int, height: int, min_pixels: int, max_pixels: int, factor: int = 28
) -> tuple[int, int]:
    """Qwen-VL's ``smart_resize`` rule, returning (width, height).

    Sides are rounded to multiples of ``factor`` and the area scaled into ``[min_pixels, max_pixels]``
    while keeping the aspect ratio as close as possible.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(width, height) / min(width, height) > 200:
        raise ValueError(f"aspect ratio of {width}x{height} exceeds 200, which Qwen-VL cannot process")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def processor_pixels(source: Any) -> tuple[int | None, int | None]:
    """(min_pixels, max_pixels) a processor would use on its own.

    ``source`` is a loaded processor (or image processor), a ``preprocessor_config.json`` dict, or a model
    folder / Hub id whose ``preprocessor_config.json`` is read (no processor is built). Both spellings of the
    Hub files are understood: ``size: {shortest_edge, longest_edge}`` (Qwen3-VL) and ``min_pixels`` /
    ``max_pixels`` (Qwen2/2.5-VL). Unknown values are ``None``.
    """
    if isinstance(source, (str, Path)):
        source = _read_preprocessor_config(str(source))
    if source is None:
        return None, None
    if not isinstance(source, Mapping):
        ip = getattr(source, "image_processor", source)
        size = getattr(ip, "size", None) or {}
        lo, hi = size.get("shortest_edge"), size.get("longest_edge")
        lo = lo if lo is not None else getattr(ip, "min_pixels", None)
        hi = hi if hi is not None else getattr(ip, "max_pixels", None)
        return lo, hi
    size = source.get("size") or {}
    # Older Qwen2-VL files spell the bounds min_pixels/max_pixels, at the top level or inside "size".
    lo = size.get("shortest_edge", size.get("min_pixels", source.get("min_pixels")))
    hi = size.get("longest_edge", size.get("max_pixels", source.get("max_pixels")))
    return lo, hi


def _read_preprocessor_config(model: str) -> dict[str, Any] | None:
    """The image processor's settings of a model folder or Hub id: ``preprocessor_config.json`` (Hub
    checkpoints), else the ``image_processor`` entry of ``processor_config.json`` (what transformers 5
    saves, e.g. r1vision's SFT output)."""
    names = ("preprocessor_config.json", "processor_config.json")
    local = Path(model).expanduser()
    if local.is_dir():
        found = next(((n, local / n) for n in names if (local / n).is_file()), None)
    else:
        found = _hub_file(model, names)
    if found is None:
        if not local.is_dir():
            logger.info("no processor config for %s; using the family's default budget", model)
        return None
    name, path = found
    data = json.loads(path.read_text())
    return data.get("image_processor", data) if name == "processor_config.json" else data


def _hub_file(model: str, names: tuple[str, ...]) -> tuple[str, Path] | None:
    """The first of ``names`` the Hub repo ``model`` has (the file alone, not the processor): from the
    cache, else downloaded once :func:`r1vision.hub.lookup` finds the repo (without that one request an
    unreachable Hub costs ~55 s of client retries per file)."""
    from huggingface_hub import hf_hub_download

    for name in names:
        try:
            return name, Path(hf_hub_download(model, name, local_files_only=True))
        except Exception:  # not in the cache
            pass
    if hub.lookup(model, "model").status in ("missing", "unreachable", "offline"):
        return None  # the client would retry for a minute and fail
    for name in names:
        try:
            return name, Path(hf_hub_download(model, name))
        except Exception:  # no such file: try the next
            pass
    return None


def resolve_budget(
    family: str,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    processor: Any = None,
) -> PixelBudget:
    """The one rule for the pixel budget, used by SFT targets, both trainers, vLLM and ``r1vision infer``.

    Explicit values win; a missing one comes from ``processor`` (a processor, a model folder or Hub id,
    see :func:`processor_pixels`), else from the family default. An inherited bound that contradicts an
    explicit one gives way: Qwen3-VL's processor asks for at least 65,536 pixels, so a max-only budget of
    3,136 gets ``min_pixels`` of one token (32² = 1,024) rather than an invalid budget; an inherited
    ``max_pixels`` below an explicit ``min_pixels`` is raised to it.
    """
    lo_p, hi_p = processor_pixels(processor) if processor is not None else (None, None)
    defaults = PixelBudget()
    lo = min_pixels if min_pixels is not None else (lo_p if lo_p is not None else defaults.min_pixels)
    hi = max_pixels if max_pixels is not None else (hi_p if hi_p is not None else defaults.max_pixels)
    if min_pixels is None and lo > hi:
        # One token, not ``hi``: with min == max the resize rule is not idempotent (a downscaled image can
        # fall under min and the processor would upscale it again), so the frames would differ.
        factor = FAMILIES[family].factor if family in FAMILIES else 28
        logger.info(
            "min_pixels %d inherited from the processor exceeds max_pixels %d; using %d", lo, hi, factor**2
        )
        lo = factor * factor
    if max_pixels is None and hi < lo:
        logger.info("max_pixels %d inherited from the processor is below min_pixels %d; using %d", hi, lo, lo)
        hi = lo
    return PixelBudget.for_family(family, min_pixels=int(lo), max_pixels=int(hi))


def apply_budget_to_processor(processor: Any, budget: PixelBudget) -> None:
    """Give the processor the same budget, so its own resize of our pre-resized images is the identity."""
    ip = processor.image_processor
    ip.size = {"shortest_edge": budget.min_pixels, "longest_edge": budget.max_pixels}
    for attr, value in (("min_pixels", budget.min_pixels), ("max_pixels", budget.max_pixels)):
        if hasattr(ip, attr):
            setattr(ip, attr, value)
