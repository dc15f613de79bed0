"""Loading images from any form a dataset row holds them in, and resizing them to the pixel budget."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from PIL import Image

from r1vision.vision.budget import PixelBudget


class ImageLoadError(ValueError):
    """An image could not be loaded; the message names the source."""


def describe_source(value: Any) -> str:
    """Short human description of an image value for error messages."""
    if isinstance(value, (str, os.PathLike)):
        return str(value)
    if isinstance(value, dict):
        return str(value.get("path") or f"<{len(value.get('bytes') or b'')} bytes>")
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, Image.Image):
        return f"<PIL {value.size[0]}x{value.size[1]}>"
    return f"<{type(value).__name__}>"


def load_image(value: Any, image_root: str | os.PathLike | None = None) -> Image.Image:
    """Return an RGB PIL image from a PIL image, a path (relative to ``image_root``), bytes, or a
    ``datasets.Image`` value (``{"bytes": ..., "path": ...}``). Raises :class:`ImageLoadError`."""
    try:
        if isinstance(value, Image.Image):
            img = value
        elif isinstance(value, dict) and ("bytes" in value or "path" in value):
            if value.get("bytes"):
                img = Image.open(io.BytesIO(value["bytes"]))
            elif value.get("path"):
                return load_image(value["path"], image_root)
            else:
                raise ImageLoadError("image value has neither bytes nor path")
        elif isinstance(value, (bytes, bytearray)):
            img = Image.open(io.BytesIO(value))
        elif isinstance(value, (str, os.PathLike)):
            path = resolve_path(value, image_root)
            if not path.is_file():
                raise ImageLoadError(f"image file not found: {path}")
            img = Image.open(path)
        else:
            raise ImageLoadError(f"unsupported image value of type {type(value).__name__}")
        img.load()  # decode now so a truncated file fails here, not inside the processor
    except ImageLoadError:
        raise
    except Exception as exc:  # PIL raises many types for corrupt data
        raise ImageLoadError(f"cannot decode image {describe_source(value)}: {exc}") from exc
    return to_rgb(img)


def to_rgb(img: Image.Image) -> Image.Image:
    """An 8-bit RGB copy of ``img``: transparency composited onto white, 16/32-bit values scaled, not clipped.

    White, because the SVG reward renders onto white and a transparent figure is meant to be seen on
    white; PIL's own ``convert("RGB")`` drops alpha (transparent pixels become their hidden colour,
    often black) and clips 16-bit grey to 255.
    """
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        import numpy as np

        arr = np.asarray(img, dtype=np.float64)
        # 16-bit sources (PNG "I;16", or "I" holding 0..65535) scale by 1/257; floats are taken as 0..1.
        scale = 1.0 / 257.0 if img.mode != "F" else 255.0
        if img.mode == "I" and arr.size and arr.max() <= 255:
            scale = 1.0  # an 8-bit image stored as 32-bit ints
        grey = Image.fromarray(np.clip(np.rint(arr * scale), 0, 255).astype(np.uint8))
        return grey.convert("RGB")
    if img.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


def resolve_path(value: str | os.PathLike, image_root: str | os.PathLike | None) -> Path:
    """A path as given if absolute, else relative to ``image_root`` (or the working directory)."""
    path = Path(value)
    if not path.is_absolute() and image_root is not None:
        path = Path(image_root) / path
    return path


def fit_to_budget(img: Image.Image, budget: PixelBudget | None) -> Image.Image:
    """Resize ``img`` to the budget's size (bicubic, as the Qwen image processor does); ``None`` (a family
    without r1vision's budget rule) leaves it to the model's processor."""
    if budget is None:
        return img
    size = budget.resized_size(*img.size)
    return img if size == img.size else img.resize(size, Image.Resampling.BICUBIC)


def count_parts(prompt: Any, kind: str) -> int:
    """Number of ``{"type": kind}`` content parts in a conversational prompt (0 for plain text)."""
    if not isinstance(prompt, list):
        return 0
    n = 0
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            n += sum(1 for part in content if isinstance(part, dict) and part.get("type") == kind)
    return n


def images_of_row(row: dict[str, Any]) -> list[Any]:
    """The raw image values of a row: the ``images`` list, or ``[image]``; empty if neither."""
    if row.get("images") is not None:
        value = row["images"]
        return list(value) if isinstance(value, (list, tuple)) else [value]
    if row.get("image") is not None:
        return [row["image"]]
    return []


def vision_columns(
    row: dict[str, Any], budget: PixelBudget | None, image_root: str | os.PathLike | None = None
) -> dict[str, Any] | None:
    """What a GRPO row carries into generation and the rewards in place of its raw image values: the
    decoded images resized to ``budget`` (``images``) with their sizes before and after
    (``original_image_sizes``, ``image_sizes``: the box frames of the SGG rewards). ``None`` for a row
    without images."""
    raw = images_of_row(row)
    if not raw:
        return None
    images = [load_image(v, image_root) for v in raw]
    resized = [fit_to_budget(img, budget) for img in images]
    return {
        "images": resized,
        "image_sizes": [list(img.size) for img in resized],
        "original_image_sizes": [list(img.size) for img in images],
    }


def with_vision_columns(row: dict[str, Any], columns: dict[str, Any] | None) -> dict[str, Any]:
    """``row`` with :func:`vision_columns` in place of its ``image``/``images`` values."""
    if columns is None:
        return row
    new = {k: v for k, v in row.items() if k != "image"}
    new.update(columns)
    return new
