"""Geometry data: MAYE's jsonl layout, the same rows from the Hub, or any dataset via a column mapping.

MAYE rows look like ``{"question": "<image>In the figure ... What is $BC$?", "answer": "20",
"solution": "\\\\boxed{20}", "id": "geometry3k_2948", "image": "geometry3k_images/geometry3k_2948.png"}``
with the image path relative to the jsonl file, and splits named ``<name>_{rl,validation,test}_v0.jsonl``.
Each ``<image>`` placeholder becomes an image slot of the user turn, at its place in the text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from r1vision.tasks.geometry.extract import extract_final_answer
from r1vision.tasks.geometry.prompts import DEFAULT_INSTRUCTION, IMAGE_PLACEHOLDER, build_prompt
from r1vision.tasks.loading import DatasetLoadError, data_files, dataset_path, load_rows

__all__ = [
    "DEFAULT_INSTRUCTION",
    "IMAGE_PLACEHOLDER",
    "GeometryDataError",
    "build_prompt",
    "load_geometry_dataset",
    "solution_text",
    "split_file",
    "to_trainer_row",
]


class GeometryDataError(DatasetLoadError):
    """A geometry dataset or one of its rows is malformed; the message names the row and field."""


def split_file(folder: Path, split: str) -> Path:
    """The one data file of ``split`` in ``folder`` (``train`` finds MAYE's ``*_rl_*.jsonl``), by the shared
    split rules of :func:`r1vision.tasks.loading.data_files`."""
    try:
        files = data_files(folder, split)
    except DatasetLoadError as exc:
        raise GeometryDataError(str(exc)) from None
    if len(files) > 1:
        raise GeometryDataError(f"{folder}: several files match split {split!r}: {[f.name for f in files]}")
    return files[0]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl file; a bad line raises with its line number."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise GeometryDataError(f"{path}:{lineno}: not valid JSON ({err.msg})") from err
            if not isinstance(row, dict):
                raise GeometryDataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def apply_column_mapping(row: Mapping[str, Any], mapping: Mapping[str, str] | None) -> dict[str, Any]:
    """Rename source columns to the canonical ``question``/``answer``/``solution``/``id``/``image(s)``."""
    out = dict(row)
    for src, dst in (mapping or {}).items():
        if src in out:
            out[dst] = out.pop(src)
    return out


def _images_of(row: Mapping[str, Any], where: str, root: Path | None, check: bool) -> list[Any]:
    field = "images" if row.get("images") is not None else "image"
    value = row.get(field)
    if value is None:
        return []
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    images = []
    for j, img in enumerate(values):
        label = f"{where}: field {field!r}" + (f"[{j}]" if len(values) > 1 else "")
        if isinstance(img, str):
            if not img.strip():
                raise GeometryDataError(f"{label} is an empty path")
            path = Path(img)
            if root is not None:  # the one rule for data paths: inside the dataset folder unless opted out
                path = Path(dataset_path(img, root, label))
            if check and root is not None and not path.is_file():
                raise GeometryDataError(f"{label}: image file not found: {path}")
            images.append(str(path))
        elif isinstance(img, dict) and (img.get("bytes") is not None or img.get("path")):
            images.append(img)
        elif hasattr(img, "size") and hasattr(img, "mode"):  # a PIL image
            images.append(img)
        else:
            raise GeometryDataError(
                f"{label}: expected a path, PIL image or {{bytes, path}}, got {type(img).__name__}"
            )
    return images


def solution_text(row: Mapping[str, Any]) -> str:
    """SFT target of a row: its ``solution``, else ``\\boxed{answer}``."""
    solution = row.get("solution")
    if isinstance(solution, str) and solution.strip():
        return solution
    return f"\\boxed{{{row.get('answer', '')}}}"


def to_trainer_row(
    row: Mapping[str, Any],
    index: int,
    source: str,
    root: Path | None = None,
    instruction: str | None = DEFAULT_INSTRUCTION,
    system_prompt: str | None = None,
    check_images: bool = True,
) -> dict[str, Any]:
    """Validate one canonical row and turn it into trainer format (prompt, images, completion, columns)."""
    where = f"{source}: row {index}" + (f" (id={row['id']!r})" if row.get("id") is not None else "")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise GeometryDataError(f"{where}: field 'question' must be a non-empty string, got {question!r:.80}")
    answer, solution = row.get("answer"), row.get("solution")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if answer is not None and not isinstance(answer, str):
        raise GeometryDataError(
            f"{where}: field 'answer' must be a string or number, got {type(answer).__name__}"
        )
    if solution is not None and not isinstance(solution, str):
        raise GeometryDataError(f"{where}: field 'solution' must be a string, got {type(solution).__name__}")
    if not (answer or "").strip() and not (solution or "").strip():
        raise GeometryDataError(f"{where}: needs a non-empty 'answer' or 'solution'")
    if not (answer or "").strip():
        answer = extract_final_answer(solution, reference=True) or ""
        if not answer:
            raise GeometryDataError(
                f"{where}: field 'solution' holds no extractable answer: {solution!r:.80}"
            )
    images = _images_of(row, where, root, check_images)
    if not images and IMAGE_PLACEHOLDER in question:
        raise GeometryDataError(f"{where}: field 'question' has {IMAGE_PLACEHOLDER} but the row has no image")
    try:
        prompt = build_prompt(question, len(images), instruction, system_prompt)
    except ValueError as err:
        raise GeometryDataError(f"{where}: field 'question': {err}") from err
    canonical = {"answer": answer.strip(), "solution": solution if solution else None}
    target = solution_text(canonical)
    out = {
        "prompt": prompt,
        "images": images,
        "question": question,
        "answer": canonical["answer"],
        "solution": target,
        "id": str(row["id"]) if row.get("id") is not None else f"{Path(source).stem}_{index}",
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": target}]}],
    }
    choices = row.get("choices")
    if choices is not None:
        if not isinstance(choices, (list, tuple)) or not all(
            isinstance(c, (str, int, float)) for c in choices
        ):
            raise GeometryDataError(f"{where}: field 'choices' must be a list of option values")
        out["choices"] = [str(c) for c in choices]
    return out


def load_geometry_dataset(
    source: str | Path | Sequence[Mapping[str, Any]],
    split: str = "train",
    column_mapping: Mapping[str, str] | None = None,
    instruction: str | None = DEFAULT_INSTRUCTION,
    system_prompt: str | None = None,
    check_images: bool = True,
    limit: int | None = None,
    **load_kwargs: Any,
):
    """Load geometry rows as a ``datasets.Dataset`` in trainer format.

    ``source`` is a MAYE jsonl file, a folder of split files (``train`` finds ``*_rl_*.jsonl``), a
    ``save_to_disk``/parquet source or a Hub id (via :func:`r1vision.tasks.loading.load_rows`), or a list
    of row dicts. ``column_mapping`` renames source columns to the canonical names, e.g.
    ``{"problem": "question"}`` for ``hiyouga/geometry3k``. Relative image paths are resolved against the
    jsonl file's folder and made absolute.
    """
    import datasets

    root: Path | None = None
    if isinstance(source, (list, tuple)):
        rows, name = [dict(r) for r in source], "rows"
    else:
        path = Path(str(source)).expanduser()
        name = str(source)
        if path.is_dir() and any(path.glob("*.jsonl")):
            path = split_file(path, split)
        if path.is_file() and path.suffix == ".jsonl":  # MAYE's layout: errors name the line
            rows, root, name = read_jsonl(path), path.parent, str(path)
        else:
            rows = list(load_rows(source, split, **load_kwargs))
    if limit is not None:
        rows = rows[:limit]
    out = [
        to_trainer_row(
            apply_column_mapping(row, column_mapping), i, name, root, instruction, system_prompt, check_images
        )
        for i, row in enumerate(rows)
    ]
    if not out:
        raise GeometryDataError(f"{name}: no rows for split {split!r}")
    if any("choices" in r for r in out):  # from_list takes its columns from the first row
        for r in out:
            r.setdefault("choices", None)
    return datasets.Dataset.from_list(out)
