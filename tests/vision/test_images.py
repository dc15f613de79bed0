"""Image loading: truncated files are named, transparency and 16-bit images convert as a viewer shows them."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.helpers.images import image_row, png_bytes
from tests.helpers.paths import ROOT

RECIPES = sorted((ROOT / "configs" / "recipes").glob("*.yaml"))


def test_truncated_image_named_by_validator():
    from r1vision.trainer.validation import DatasetValidationError, validate_row

    data = png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"))
    with pytest.raises(DatasetValidationError, match=r"row 0 id='r7': images\[0\]"):
        validate_row(image_row(data[: len(data) // 2]), 0)


def test_rgba_on_white_and_16bit_scaled():
    import numpy as np

    from r1vision.vision.images import load_image

    transparent = load_image(png_bytes(Image.new("RGBA", (4, 4), (0, 0, 0, 0))))
    assert transparent.getpixel((0, 0)) == (255, 255, 255)  # PIL's convert("RGB") gives black
    half = load_image(png_bytes(Image.new("RGBA", (4, 4), (0, 0, 0, 128))))
    assert 120 <= half.getpixel((0, 0))[0] <= 135
    grey16 = load_image(png_bytes(Image.fromarray(np.full((4, 4), 32768, dtype=np.uint16))))
    assert grey16.mode == "RGB" and abs(grey16.getpixel((0, 0))[0] - 128) <= 1  # PIL clips to 255
