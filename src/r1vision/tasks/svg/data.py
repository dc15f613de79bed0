"""Load image -> SVG datasets into trainer format.

Two row shapes are understood:

- **VFig** (verl parquet): ``prompt`` (chat messages, ``<image>`` placeholders in string content),
  ``response`` (ground-truth SVG), ``images`` (PNG paths, or ``{"image"/"path"/"bytes"}`` dicts),
  ``reward_model.ground_truth`` (PNG path), ``extra_info.png_size``.
- **Any dataset with an image column and an SVG column**, named by ``columns={"image": ..., "svg": ...}``
  (optionally ``"id"``), Hub or local; the prompt is :data:`PROMPT`.

Output columns: ``prompt``, ``images``, ``completion`` (assistant turn holding the SVG, for SFT), ``svg_gt``
(the SVG, for the length reward), ``gt_image`` (absolute PNG path, or ``None`` when the image is an in-dataset
image and rewards should read ``images``), ``png_size`` and ``id``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from r1vision.tasks.loading import DatasetLoadError, dataset_path, load_rows
from r1vision.tasks.svg.prompts import PROMPT

VFIG_COLUMNS = ("prompt", "response")


def _message_parts(content: Any) -> list[dict[str, Any]]:
    """Trainer-format content parts from a string with ``<image>`` placeholders or a list of parts."""
    if isinstance(content, str):
        parts: list[dict[str, Any]] = []
        for k, chunk in enumerate(content.split("<image>")):
            if k:
                parts.append({"type": "image"})
            if chunk.strip():
                parts.append({"type": "text", "text": chunk.strip()})
        return parts
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image":
                out.append({"type": "image"})
            elif isinstance(part, dict) and part.get("type") == "text":
                out.append({"type": "text", "text": str(part.get("text") or "")})
        return out
    return []


def convert_prompt(messages: Any, n_images: int, where: str) -> list[dict[str, Any]]:
    """VFig/verl chat messages -> trainer messages with exactly ``n_images`` image parts."""
    if not isinstance(messages, list) or not messages:
        raise DatasetLoadError(
            f"{where}: 'prompt' must be a non-empty list of messages, got {type(messages).__name__}"
        )
    out = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise DatasetLoadError(f"{where}: every prompt message needs a 'role', got {m!r:.80}")
        out.append({"role": m["role"], "content": _message_parts(m.get("content"))})
    found = sum(p["type"] == "image" for m in out for p in m["content"])
    if found == 0 and n_images:
        first_user = next((m for m in out if m["role"] == "user"), None)
        if first_user is None:
            raise DatasetLoadError(f"{where}: prompt has no user message to attach the image to")
        first_user["content"] = [{"type": "image"} for _ in range(n_images)] + first_user["content"]
    elif found != n_images:
        raise DatasetLoadError(
            f"{where}: prompt has {found} <image> placeholders but the row has {n_images} images"
        )
    return out


def _image_value(value: Any, root: Path | None, where: str) -> Any:
    """A path string made absolute (relative to ``root``), or an in-memory image value unchanged."""
    written = not isinstance(value, dict)  # a path a row wrote, not one the datasets library stored
    if isinstance(value, dict):
        if value.get("bytes") is not None:
            return value
        value = value.get("image") or value.get("path")
    if isinstance(value, str):
        if root is not None and written:  # the one rule for data paths: inside the dataset folder
            return dataset_path(value, root, where)
        p = Path(value).expanduser()
        return str(root / p if root is not None and not p.is_absolute() else p)
    if value is None:
        raise DatasetLoadError(f"{where}: missing image")
    return value


def _root(source: str | Path, image_root: str | Path | None) -> Path | None:
    if image_root is not None:
        return Path(image_root).expanduser().resolve()
    path = Path(str(source)).expanduser()
    if path.is_file():
        return path.resolve().parent
    if path.is_dir():
        return path.resolve()
    return None


def _png_size(extra: Any) -> list[int] | None:
    size = extra.get("png_size") if isinstance(extra, dict) else None
    if isinstance(size, str):  # some exports store "[w, h]" or "w,h"
        size = [int(float(v)) for v in size.strip("[]() ").replace("x", ",").split(",") if v.strip()]
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return [int(size[0]), int(size[1])]
    return None


def vfig_row(row: dict[str, Any], index: int, root: Path | None) -> dict[str, Any]:
    """Convert one VFig row; errors name the row and field."""
    where = f"row {index}"
    svg = row.get("response")
    if not isinstance(svg, str) or "<svg" not in svg.lower():
        raise DatasetLoadError(f"{where}: 'response' must be the ground-truth SVG text")
    images = row.get("images")
    images = images if isinstance(images, list) else ([] if images is None else [images])
    images = [_image_value(v, root, f"{where} 'images'") for v in images]
    reward_model = row.get("reward_model") if isinstance(row.get("reward_model"), dict) else {}
    gt = reward_model.get("ground_truth")
    gt_image = _image_value(gt, root, f"{where} 'reward_model.ground_truth'") if isinstance(gt, str) else None
    if gt_image is None and images and isinstance(images[0], str):
        gt_image = images[0]
    if not images:
        if gt_image is None:
            raise DatasetLoadError(f"{where}: no 'images' and no 'reward_model.ground_truth'")
        images = [gt_image]
    extra = row.get("extra_info")
    return {
        "prompt": convert_prompt(row.get("prompt"), len(images), where),
        "images": images,
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": svg}]}],
        "svg_gt": svg,
        "gt_image": gt_image,
        "png_size": _png_size(extra),
        "id": str((extra or {}).get("index", index) if isinstance(extra, dict) else index),
    }


def mapped_row(row: dict[str, Any], index: int, columns: dict[str, str], root: Path | None, prompt: str):
    """Convert one row of a generic (image, SVG) dataset named by ``columns``."""
    where = f"row {index}"
    svg = row.get(columns["svg"])
    if not isinstance(svg, str) or "<svg" not in svg.lower():
        raise DatasetLoadError(f"{where}: column {columns['svg']!r} must hold SVG text")
    image = _image_value(row.get(columns["image"]), root, f"{where} {columns['image']!r}")
    size = None
    if hasattr(image, "size") and not isinstance(image, (str, dict)):
        size = [int(image.size[0]), int(image.size[1])]
    return {
        "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}],
        "images": [image],
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": svg}]}],
        "svg_gt": svg,
        "gt_image": image if isinstance(image, str) else None,
        "png_size": size,
        "id": str(row.get(columns.get("id", "")) or index),
    }


def load_svg_dataset(
    source: str | Path,
    split: str = "train",
    columns: dict[str, str] | None = None,
    image_root: str | Path | None = None,
    prompt: str = PROMPT,
    limit: int | None = None,
    **hub_kwargs: Any,
):
    """Load ``source`` (Hub id, directory or file) as a trainer-format ``datasets.Dataset``.

    Without ``columns`` the VFig schema is required; with ``columns={"image": ..., "svg": ...}`` any dataset
    works. Relative image paths resolve against ``image_root``, else the dataset file's folder.
    """
    required = (columns["image"], columns["svg"]) if columns else VFIG_COLUMNS
    if columns and not {"image", "svg"} <= set(columns):
        raise DatasetLoadError(f"columns must map 'image' and 'svg', got {columns}")
    dataset = load_rows(source, split, required=required, **hub_kwargs)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    root = _root(source, image_root)
    if columns:
        fn = lambda row, i: mapped_row(row, i, columns, root, prompt)  # noqa: E731
    else:
        fn = lambda row, i: vfig_row(row, i, root)  # noqa: E731
    converted = dataset.map(fn, with_indices=True, remove_columns=dataset.column_names, desc="svg rows")
    missing = [p for p in converted["gt_image"][:8] if isinstance(p, str) and not os.path.isfile(p)]
    if missing:
        raise DatasetLoadError(
            f"{source}: ground-truth images not found, e.g. {missing[0]} (set image_root?)"
        )
    return converted
