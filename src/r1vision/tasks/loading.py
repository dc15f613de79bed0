"""One loader for every task: a Hub id, a ``save_to_disk`` folder, a folder of split files, or one file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetLoadError(ValueError):
    """A dataset source cannot be loaded or lacks required columns; the message names it."""


def _split_file(folder: Path, split: str) -> Path | None:
    """The file for ``split`` in ``folder``: ``{split}.ext`` first, else the one file whose name contains it."""
    for ext in _FILE_BUILDERS:
        candidate = folder / f"{split}{ext}"
        if candidate.is_file():
            return candidate
    matches = sorted(p for p in folder.iterdir() if p.suffix in _FILE_BUILDERS and split in p.stem)
    if len(matches) > 1:
        raise DatasetLoadError(f"{folder}: several files match split {split!r}: {[m.name for m in matches]}")
    return matches[0] if matches else None


def load_rows(source: str | Path, split: str = "train", required: Sequence[str] = (), **kwargs: Any):
    """Load ``source`` as a ``datasets.Dataset``.

    Local string image paths (columns ``image``/``images``) are made absolute relative to the data file,
    so rows stay valid wherever the training process runs.
    """
    import datasets

    path = Path(str(source)).expanduser()
    data_file: Path | None = None
    if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "state.json").exists()):
        loaded = datasets.load_from_disk(str(path))
        dataset = loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
    elif path.is_dir() and (path / "dataset_dict.json").exists():
        dataset = datasets.load_from_disk(str(path))[split]
    elif path.is_dir():
        data_file = _split_file(path, split)
        if data_file is None:
            raise DatasetLoadError(
                f"{path}: no data file for split {split!r} (looked for {split}.jsonl/.parquet/...)"
            )
    elif path.is_file():
        data_file = path
    elif str(source).startswith((".", "/")) or path.suffix in _FILE_BUILDERS:
        raise DatasetLoadError(f"dataset path does not exist: {path}")
    else:  # a Hub id
        dataset = datasets.load_dataset(str(source), split=split, **kwargs)
    if data_file is not None:
        builder = _FILE_BUILDERS.get(data_file.suffix)
        if builder is None:
            raise DatasetLoadError(f"{data_file}: unsupported file type (use {', '.join(_FILE_BUILDERS)})")
        dataset = datasets.load_dataset(builder, data_files=str(data_file), split="train")
        dataset = _absolute_image_paths(dataset, data_file.parent)
    missing = [c for c in required if c not in dataset.column_names]
    if missing:
        raise DatasetLoadError(f"{source}: missing column(s) {missing}; has {dataset.column_names}")
    return dataset


def _absolute_image_paths(dataset, root: Path):
    import datasets

    def fix(value: Any) -> Any:
        if isinstance(value, str) and value and not value.startswith(("data:", "http://", "https://")):
            p = Path(value)
            return str(p if p.is_absolute() else (root / p).resolve())
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    columns = [
        c
        for c in ("image", "images")
        if c in dataset.column_names and not isinstance(dataset.features[c], datasets.Image)
    ]
    if not columns:
        return dataset
    return dataset.map(lambda row: {c: fix(row[c]) for c in columns}, desc="resolving image paths")
