"""Load SGG rows (schema of ``JosephZ/vg150_train_sgg_prompt``), validate them, convert to trainer format.

Raw schema: ``image_id``, ``image``, ``prompt_open``, ``prompt_close``, ``objects`` (JSON string: list of
``{"id": "name.N", "bbox": [x1, y1, x2, y2]}`` in original pixels) and ``relationships`` (JSON string:
list of ``{"subject", "predicate", "object"}``). The same code loads a Hub id, a ``save_to_disk``
directory, a directory of parquet/jsonl files, or one such file.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r1vision.tasks.loading import DatasetLoadError, dataset_path, load_rows, locate
from r1vision.tasks.sgg.boxes import box_frame
from r1vision.tasks.sgg.categories import Vocabulary
from r1vision.tasks.sgg.prompts import build_messages, build_prompt, format_answer, r1sgg_prompt
from r1vision.vision.budget import PixelBudget

if TYPE_CHECKING:  # `datasets` and PIL load when a function needs them: `r1vision eval` may need neither
    import datasets

REQUIRED_GT_FIELDS = ("image_id", "objects", "relationships")


def load_raw(source: str | Path, split: str = "train") -> tuple[datasets.Dataset, Path | None]:
    """Raw rows of ``source`` and the directory relative image paths resolve against (None for the Hub).

    Reads through the shared loader (:func:`r1vision.tasks.loading.load_rows`): its split aliases, the
    Hub's ``data/<split>-*.parquet`` layout and single-split sources (R1-SGG's validation set keeps its
    rows in a split named ``train``) behave as for every task.
    """
    where = locate(source, split)
    return load_rows(source, split), where.root


def _fail(index: int, row: dict[str, Any], field: str, message: str) -> ValueError:
    return ValueError(f"SGG row {index} (image_id={row.get('image_id')!r}): field {field!r}: {message}")


def validate_row(row: dict[str, Any], index: int = 0) -> tuple[list[dict], list[dict]]:
    """Check one raw row; return decoded (objects, relationships). Errors name the row and the field."""
    for field in REQUIRED_GT_FIELDS:
        if field not in row or row[field] is None:
            raise _fail(index, row, field, "missing")
    decoded = []
    for field in ("objects", "relationships"):
        value = row[field]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise _fail(index, row, field, f"not valid JSON ({exc})") from None
        if not isinstance(value, list):
            raise _fail(index, row, field, f"expected a JSON list, got {type(value).__name__}")
        decoded.append(value)
    objects, relationships = decoded
    ids: set[str] = set()
    for k, obj in enumerate(objects):
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not obj["id"]:
            raise _fail(index, row, "objects", f"entry {k} needs a non-empty string 'id': {obj!r}")
        box = obj.get("bbox")
        ok = isinstance(box, (list, tuple)) and len(box) == 4
        ok = ok and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in box
        )
        if not ok or box[0] > box[2] or box[1] > box[3]:
            raise _fail(
                index, row, "objects", f"entry {k} ({obj['id']}): bbox must be [x1,y1,x2,y2], got {box!r}"
            )
        if obj["id"] in ids:
            raise _fail(index, row, "objects", f"duplicate id {obj['id']!r}")
        ids.add(obj["id"])
    for k, rel in enumerate(relationships):
        if not isinstance(rel, dict) or not all(
            isinstance(rel.get(f), str) for f in ("subject", "predicate", "object")
        ):
            raise _fail(
                index, row, "relationships", f"entry {k} needs string subject/predicate/object: {rel!r}"
            )
        for end in ("subject", "object"):
            if rel[end] not in ids:
                raise _fail(index, row, "relationships", f"entry {k}: {end} {rel[end]!r} is not an object id")
    return objects, relationships


def validate_rows(ds: datasets.Dataset) -> None:
    """Validate every row (reads only the GT columns, so images are not decoded)."""
    missing = [f for f in REQUIRED_GT_FIELDS if f not in ds.column_names]
    if missing:
        raise ValueError(f"SGG dataset lacks column(s) {missing}; has {ds.column_names}")
    for i, row in enumerate(ds.select_columns(list(REQUIRED_GT_FIELDS))):
        validate_row(row, i)


def image_size(value: Any, root: Path | None = None) -> tuple[int, int]:
    """(width, height) of an image value (PIL, ``{"bytes", "path"}`` dict, bytes or a path), header only."""
    from PIL import Image as PILImage

    if isinstance(value, PILImage.Image):
        return value.size
    written = not isinstance(value, dict)  # a path a row wrote, not one the datasets library stored
    if isinstance(value, dict):
        if value.get("bytes"):
            value = value["bytes"]
        else:
            value = value.get("path")
    if isinstance(value, (bytes, bytearray)):
        with PILImage.open(io.BytesIO(value)) as im:
            return im.size
    if isinstance(value, (str, Path)):
        p = Path(value)
        if root is not None and written:
            p = Path(dataset_path(str(value), root))  # the one data-path rule
        elif root is not None and not p.is_absolute():
            p = root / p
        with PILImage.open(p) as im:
            return im.size
    raise ValueError(f"cannot read an image size from {type(value).__name__}")


def sft_target(
    objects: Any,
    relationships: Any,
    original_size: tuple[int, int],
    model_family: str,
    budget: PixelBudget | None = None,
) -> str:
    """SFT answer text: GT boxes converted to ``model_family``'s frame by :meth:`BoxFrame.to_model`."""
    objs = json.loads(objects) if isinstance(objects, str) else list(objects)
    rels = json.loads(relationships) if isinstance(relationships, str) else list(relationships)
    frame = box_frame(model_family, original_size, None, budget)
    converted = [{"id": o["id"], "bbox": frame.to_model(o["bbox"])} for o in objs]
    return format_answer(converted, rels)


def to_trainer_format(
    ds: datasets.Dataset,
    root: Path | None = None,
    *,
    model_family: str | None = None,
    vocabulary: Vocabulary | None = None,
    think: bool = False,
    system: str | None = None,
    with_completion: bool | None = None,
    budget: PixelBudget | None = None,
    prompt_text: str | None = None,
    prompt_column: str | None = None,
) -> datasets.Dataset:
    """Trainer rows: ``prompt``, ``images``, ``image_id``, ``objects``, ``relationships`` [+ ``completion``].

    ``vocabulary`` given = closed-vocabulary prompt. ``completion`` (SFT target) needs ``model_family``
    and is added by default when it is known. ``prompt_text`` replaces the built instruction;
    ``prompt_column`` takes each row's own prompt from that column as R1-SGG does (:func:`r1sgg_prompt`).
    """
    import datasets

    with_completion = model_family is not None if with_completion is None else with_completion
    if with_completion and model_family is None:
        raise ValueError("SFT targets need model_family (their boxes are in the family's frame)")
    if "image" not in ds.column_names:
        raise ValueError(f"SGG dataset has no 'image' column; columns: {ds.column_names}")
    text = prompt_text or build_prompt(
        family=model_family,
        objects=vocabulary.objects if vocabulary else None,
        predicates=vocabulary.predicates if vocabulary else None,
        think=think,
    )
    image_feature = ds.features.get("image")
    if isinstance(image_feature, datasets.Image):
        ds = ds.cast_column("image", datasets.Image(decode=False))  # sizes from headers, no full decode

    if prompt_column is not None and prompt_column not in ds.column_names:
        raise DatasetLoadError(
            f"the dataset has no {prompt_column!r} column (R1-SGG's prompts need it); columns: {ds.column_names}"
        )

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        user = r1sgg_prompt(str(row[prompt_column])) if prompt_column else text
        out = {"prompt": build_messages(user, system), "images": [row["image"]]}
        if with_completion:
            try:
                size = image_size(row["image"], root)
            except Exception as exc:  # PIL raises many types for missing, truncated or non-image files
                raise _fail(index, row, "image", f"cannot read the image: {exc}") from exc
            target = sft_target(row["objects"], row["relationships"], size, model_family, budget)
            out["completion"] = [{"role": "assistant", "content": [{"type": "text", "text": target}]}]
        return out

    keep = {"image_id", "objects", "relationships"}
    drop = [c for c in ds.column_names if c not in keep]
    ds = ds.map(convert, remove_columns=drop, desc="sgg rows", with_indices=True)
    if isinstance(image_feature, datasets.Image):
        ds = ds.cast_column("images", datasets.List(datasets.Image()))
    return ds
