"""Image bytes and one-image trainer rows for the image-handling tests."""

from __future__ import annotations

import io
from typing import Any

from PIL import Image


def png_bytes(img: Image.Image) -> bytes:
    """``img`` encoded as PNG."""
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def image_row(image: Any) -> dict:
    """A trainer row with one image part and ``image`` as its image."""
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}]
    return {"prompt": prompt, "images": [image], "id": "r7"}
