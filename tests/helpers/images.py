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


def tiny_vlm_batch(path: str) -> tuple[Any, Any]:
    """The tiny VLM at ``path`` and a left-padded batch of three one-image prompts of different lengths."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(path)
    proc = AutoProcessor.from_pretrained(path)
    proc.tokenizer.padding_side = "left"
    msgs = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour? " * (i + 1)}]}]
            for i in range(3)]  # fmt: skip
    texts = [proc.apply_chat_template(m, add_generation_prompt=True) for m in msgs]
    images = [[Image.new("RGB", (56, 56), (200, 0, 0))]] * 3
    return model, proc(text=texts, images=images, return_tensors="pt", padding=True)
