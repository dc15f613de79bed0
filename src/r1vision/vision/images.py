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
    return img.convert("RGB") if img.mode != "RGB" else img


def resolve_path(value: str | os.PathLike, image_root: str | os.PathLike | None) -> Path:
    """A path as given if absolute, else relative to ``image_root`` (or the working directory)."""
    path = Path(value)
    if not path.is_absolute() and image_root is not None:
        path = Path(image_root) / path
    return path


def fit_to_budget(img: Image.Image, budget: PixelBudget) -> Image.Image:
    """Resize ``img`` to the budget's size (bicubic, as the Qwen image processor does)."""
    size = budget.resized_size(*img.size)
    return img if size == img.size else img.resize(size, Image.Resampling.BICUBIC)


def images_of_row(row: dict[str, Any]) -> list[Any]:
    """The raw image values of a row: the ``images`` list, or ``[image]``; empty if neither."""
    if row.get("images") is not None:
        value = row["images"]
        return list(value) if isinstance(value, (list, tuple)) else [value]
    if row.get("image") is not None:
        return [row["image"]]
    return []
