"""The pixel budget: one rule for the size every image is resized to, used by GRPO, SFT, inference and vLLM.

Qwen-VL vision towers cut images into ``patch_size`` patches and merge ``merge_size``² of them into one
token, so both sides must be multiples of ``factor = patch_size * merge_size`` (28 for Qwen2/2.5-VL,
32 for Qwen3-VL) and the area must lie in ``[min_pixels, max_pixels]``. We resize images ourselves with
:func:`resized_size` *before* the processor sees them, and give the processor the same budget, so its own
resize is a no-op and the size a reward function sees is exactly the size the model saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# (patch_size, merge_size) per model family; Qwen3-VL uses 16-pixel patches.
FAMILY_PATCH = {"qwen2_vl": (14, 2), "qwen2_5_vl": (14, 2), "qwen3_vl": (16, 2)}
# Which coordinate frame a family's grounding outputs use (see the Qwen technical reports).
FAMILY_BOX_FRAME = {"qwen2_vl": "norm1000", "qwen2_5_vl": "pixels", "qwen3_vl": "norm1000"}


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
        patch, merge = FAMILY_PATCH.get(family, (14, 2))
        factor = patch * merge
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
