"""One loader for every task: a Hub id, a ``save_to_disk`` folder, a folder of split files, or one file.

Split names go through one alias table (:data:`SPLIT_ALIASES`): ``val``, ``valid``, ``dev`` and
``validation`` name the same split, ``rl`` (MAYE's file names) and ``train`` another. Where a source holds
a single split — R1-SGG's validation set keeps its rows in a split named ``train``, a lone file, a folder
with one untagged data file — that split is used for any requested name, with a notice on the log.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r1vision.tasks.fastjson import loads

logger = logging.getLogger(__name__)

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
# JSON files that describe a dataset rather than hold its rows.
_METADATA_FILES = {"vocab.json", "dataset_info.json", "state.json", "dataset_dict.json"}

_SHARD = re.compile(r"^(?P<prefix>.*?)-\d+-of-\d+$")

# Each group is one split; the first name is the canonical one.
SPLIT_ALIASES: tuple[tuple[str, ...], ...] = (
    ("train", "rl", "training"),
    ("validation", "val", "valid", "dev"),
    ("test", "testing"),
)


class DatasetLoadError(ValueError):
    """A dataset source cannot be loaded or lacks required columns; the message names it."""


class DatasetValidationError(ValueError):
    """A dataset row cannot be trained on; the message names the row and the offending field or path."""


def split_names(split: str) -> tuple[str, ...]:
    """Every name of ``split``: the name itself first, then its aliases (``val`` → val, validation, ...)."""
    for group in SPLIT_ALIASES:
        if split in group:
            return (split, *(name for name in group if name != split))
    return (split,)


def canonical_split(split: str) -> str:
    """The canonical name of ``split``'s group (``val`` → ``validation``); unknown names are kept."""
    for group in SPLIT_ALIASES:
        if split in group:
            return group[0]
    return split


def _tokens(name: str) -> list[str]:
    return name.lower().replace("-", "_").replace(".", "_").split("_")


def _split_of(file: Path, folder: Path) -> str | None:
    """The canonical split a data file belongs to by its name or a parent folder's name, if any."""
    names = [file.stem, *(p.name for p in file.relative_to(folder).parents if p.name)]
    for name in names:
        tokens = _tokens(name)
        for group in SPLIT_ALIASES:
            if name.lower() in group or any(t in group for t in tokens):
                return group[0]
    return None


def _named_exactly(file: Path, folder: Path, split: str) -> bool:
    """The file's name (or shard prefix, or a parent folder) is ``split`` itself."""
    match = _SHARD.match(file.stem)
    stem = match.group("prefix") if match else file.stem
    return stem == split or any(p.name == split for p in file.relative_to(folder).parents if p.name)


def pick_split(available: Sequence[str], split: str, source: Any) -> str:
    """The name among ``available`` that serves ``split`` (aliases; a lone split serves any request)."""
    for name in split_names(split):
        if name in available:
            return name
    if len(available) == 1 and known_split(split):
        only = next(iter(available))
        logger.warning("%s has one split, %r; using it for split %r", source, only, split)
        return only
    raise DatasetLoadError(f"{source}: no split {split!r}; available: {', '.join(available)}")


def known_split(split: str) -> bool:
    """A name of the split-alias table (train, validation, test and their aliases). A lone split serves
    any of these; another name (``nosuchsplit``, a typo) is refused rather than silently served."""
    return any(split in group for group in SPLIT_ALIASES)


def data_files(folder: Path, split: str) -> list[Path]:
    """The data files of ``split`` in ``folder`` (recursively, so the Hub's ``data/<split>-*.parquet``
    layout works). Files are matched by the canonical split of their name or folder; a folder whose files
    name no split, or name a single one, is one split and serves any request (with a notice)."""
    files = sorted(
        f
        for f in folder.rglob("*")
        if f.is_file()
        and f.suffix in _FILE_BUILDERS
        and f.name not in _METADATA_FILES
        and not any(part.startswith(".") for part in f.relative_to(folder).parts)
    )
    if not files:
        raise DatasetLoadError(
            f"{folder}: no data files (.jsonl/.json/.parquet/.csv/.arrow) and not a saved dataset"
        )
    exact = [f for f in files if _named_exactly(f, folder, split)]
    if exact:  # a split named exactly as asked wins over aliases (the demo keeps "train" and "rl" apart)
        return _one_dataset(exact, folder, split)
    tagged = {f: _split_of(f, folder) for f in files}
    wanted = canonical_split(split)
    chosen = [f for f, s in tagged.items() if s == wanted]
    if chosen:
        return _one_dataset(chosen, folder, split)
    present = sorted({s for s in tagged.values() if s is not None})
    if len(present) <= 1 and known_split(split):
        logger.warning(
            "%s holds one split (%s); using it for split %r",
            folder,
            present[0] if present else "untagged",
            split,
        )
        return files
    raise DatasetLoadError(
        f"{folder}: no files for split {split!r} (aliases {list(split_names(split))}); "
        f"it has splits {present}: {[str(f.relative_to(folder)) for f in files]}"
    )


def _one_dataset(files: list[Path], folder: Path, split: str) -> list[Path]:
    """``files`` when they are parts of one dataset (shards ``x-00000-of-00002``, or files in a folder named
    after the split); several unrelated files for one split (e.g. ``geometry3k_test`` and ``mm_math_test``)
    are ambiguous and an error."""
    if len(files) == 1:
        return files
    prefixes = {m.group("prefix") if (m := _SHARD.match(f.stem)) else None for f in files}
    parents = {f.parent for f in files}
    if (len(prefixes) == 1 and None not in prefixes) or (
        len(parents) == 1 and canonical_split(next(iter(parents)).name) == canonical_split(split)
    ):
        return files
    raise DatasetLoadError(
        f"{folder}: several files match split {split!r}: {[str(f.relative_to(folder)) for f in files]}; "
        "pass one file"
    )


@dataclass(frozen=True)
class Located:
    """Where a source's rows for one split are: ``kind`` is ``hub``, ``disk`` or ``files``."""

    kind: str
    source: str
    split: str
    files: tuple[Path, ...] = ()
    root: Path | None = None  # the folder relative image paths resolve against


def locate(source: str | Path, split: str = "train") -> Located:
    """Decide how to read ``split`` of ``source`` without reading any rows."""
    path = Path(str(source)).expanduser()
    if path.is_dir() and any(
        (path / n).exists() for n in ("dataset_info.json", "state.json", "dataset_dict.json")
    ):
        return Located("disk", str(path), split, root=path)
    if path.is_dir():
        return Located("files", str(path), split, tuple(data_files(path, split)), path)
    if path.is_file():
        if path.suffix not in _FILE_BUILDERS:
            raise DatasetLoadError(f"{path}: unsupported file type (use {', '.join(_FILE_BUILDERS)})")
        named = _split_of(path, path.parent)
        if named != canonical_split(split) and path.stem != split:  # say so: the split is not applied
            what = f"split {named!r}" if named else "no split in its name"
            logger.warning("%s is a single file (%s); using it for split %r", path, what, split)
        return Located("files", str(path), split, (path,), path.parent)
    if str(source).startswith((".", "/", "~")) or path.suffix in _FILE_BUILDERS:
        raise DatasetLoadError(f"dataset path does not exist: {path}")
    return Located("hub", str(source), split)


def load_rows(source: str | Path, split: str = "train", required: Sequence[str] = (), **hub_kwargs: Any):
    """Load ``split`` of ``source`` as a ``datasets.Dataset``.

    Local string media paths (columns ``image``/``images``/``video``/``videos``, Video-R1's ``path``) are
    made absolute relative to the data file,
    so rows stay valid wherever the training process runs. ``hub_kwargs`` go to ``datasets.load_dataset``.
    """
    import datasets

    where = locate(source, split)
    if where.kind == "disk":
        loaded = datasets.load_from_disk(where.source)
        if isinstance(loaded, datasets.DatasetDict):
            loaded = loaded[pick_split(list(loaded), split, source)]
        dataset = loaded
    elif where.kind == "hub":
        dataset = _load_hub(where.source, split, hub_kwargs)
    else:
        dataset = _load_files(list(where.files), split)
        dataset = _absolute_image_paths(dataset, where.files[0].parent)
    dataset = _undecoded_videos(dataset)
    if len(dataset) == 0:
        raise DatasetLoadError(f"{source}: split {split!r} has no rows")
    missing = [c for c in required if c not in dataset.column_names]
    if missing:
        raise DatasetLoadError(f"{source}: missing column(s) {missing}; has {dataset.column_names}")
    return dataset


def read_json_lines(where: Located) -> Iterator[dict[str, Any]] | None:
    """The rows of ``where`` read straight from JSON-lines files, one at a time, or None when it is not such
    a source.

    A fast path for readers that only iterate rows (evaluation): no ``datasets`` import, no Arrow cache, and
    memory flat in the number of rows. Local image paths are absolute, as :func:`load_rows` makes them; a
    row lacks the columns its line lacks (read them with ``.get``), and column types are not unified across
    rows as Arrow does (an integer stays an integer next to floats).
    """

    if where.kind != "files" or not where.files or any(f.suffix != ".jsonl" for f in where.files):
        return None

    def rows() -> Iterator[dict[str, Any]]:
        root, index = where.files[0].parent, 0
        for file in where.files:
            with open(file, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    try:
                        row = loads(line)
                    except ValueError as exc:
                        raise DatasetLoadError(f"{file}:{number}: not a JSON line ({exc})") from exc
                    if not isinstance(row, dict):
                        raise DatasetLoadError(f"{file}:{number}: a row must be a JSON object")
                    for c in media_columns(row):
                        if c in row:
                            row[c] = _absolute_path(row[c], root, index)
                    index += 1
                    yield row
        if not index:
            raise DatasetLoadError(f"{where.files[0]}: split {where.split!r} is empty (no rows)")

    return rows()


# Set (to 1) by ``--allow_external_paths`` on any command (r1vision.cli), so launched workers inherit it.
EXTERNAL_PATHS_ENV = "R1VISION_ALLOW_EXTERNAL_PATHS"


def external_paths_allowed() -> bool:
    """Whether dataset rows may name files outside their dataset folder (``--allow_external_paths``)."""
    return os.environ.get(EXTERNAL_PATHS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def dataset_path(value: str, root: Path | str, where: str = "") -> str:
    """A file path written in a dataset row, absolute, checked against the one rule for data paths.

    Relative paths are relative to ``root`` (the dataset folder). A path that leaves the folder, relative
    (``../../home/me/.ssh/x.png``) or absolute (``/etc/...``), is refused naming ``where`` (the row and
    field) unless the user opted in with ``--allow_external_paths``: a dataset's rows name files of the
    dataset. The check is on where the path is written, not where a link points: ``images/`` may be a
    symlink into a shared store (a common cluster layout)."""
    base = Path(os.path.normpath(os.path.abspath(Path(root).expanduser())))
    p = Path(value).expanduser()
    resolved = Path(os.path.normpath(p if p.is_absolute() else base / p))  # ".." folded; links not followed
    if resolved != base and base not in resolved.parents and not external_paths_allowed():
        kind = "absolute path" if p.is_absolute() else "path"
        raise DatasetLoadError(
            f"{where + ' ' if where else ''}{kind} {value!r} leads outside the dataset folder {base}; keep the "
            "files inside it, or pass --allow_external_paths to read files anywhere"
        )
    return str(resolved)


def _undecoded_videos(dataset):
    """Hub ``Video`` columns as ``{"path", "bytes"}``: ``datasets`` decodes them with torchcodec, which has no
    CPU build for torch 2.13; r1vision samples and decodes the frames itself (``vision.video.load_clip``)."""
    import datasets

    features = getattr(dataset, "features", None) or {}
    for name, feature in features.items():
        if isinstance(feature, datasets.Video) and feature.decode:
            dataset = dataset.cast_column(name, datasets.Video(decode=False))
    return dataset


def media_columns(columns: Any) -> list[str]:
    """The columns of ``columns`` that hold local media paths: ``image``/``images``/``video``/``videos``,
    and ``path`` in Video-R1's schema (rows with a ``data_type`` column)."""
    found = [c for c in ("image", "images", "video", "videos") if c in columns]
    if "data_type" in columns and "path" in columns:
        found.append("path")
    return found


def _absolute_path(value: Any, root: Path, row: int | None = None) -> Any:
    """A local image path (or a list of them) made absolute relative to ``root`` under :func:`dataset_path`'s
    rule; URLs, data URIs and other values as they are."""
    if isinstance(value, str) and value and not value.startswith(("data:", "http://", "https://")):
        return dataset_path(value, root, f"row {row}: image" if row is not None else "image")
    if isinstance(value, list):
        return [_absolute_path(v, root, row) for v in value]
    return value


def _load_hub(source: str, split: str, hub_kwargs: dict[str, Any]):
    import datasets

    try:  # split names from the builder's metadata, so only the wanted split is read
        available = list((datasets.load_dataset_builder(source, **hub_kwargs).info.splits or {}).keys())
    except Exception as exc:  # noqa: BLE001 - no metadata: read every split and pick below
        logger.info("no split list for %s (%s); reading all its splits", source, exc)
        available = []
    if available:
        return datasets.load_dataset(source, split=pick_split(available, split, source), **hub_kwargs)
    errors = []
    for name in split_names(split):  # no metadata: ask by each name of the split
        try:
            loaded = datasets.load_dataset(source, split=name, **hub_kwargs)
        except (ValueError, KeyError) as exc:  # datasets' unknown-split error is a ValueError
            errors.append(f"{name}: {exc}")
            continue
        return loaded[pick_split(list(loaded), split, source)] if isinstance(loaded, dict) else loaded
    loaded = datasets.load_dataset(source, **hub_kwargs)  # a source with one split under another name
    if isinstance(loaded, dict):
        return loaded[pick_split(list(loaded), split, source)]
    raise DatasetLoadError(f"{source}: cannot load split {split!r}: {'; '.join(errors)}")


def _load_files(files: list[Path], split: str):
    import datasets

    kinds = {_FILE_BUILDERS[f.suffix] for f in files}
    if len(kinds) != 1:
        raise DatasetLoadError(
            f"cannot load {[str(f) for f in files]} together: use one kind of file per split"
        )
    kind = kinds.pop()
    # datasets' JSON/CSV builders fail on an empty file with a bare StopIteration from their generator
    empty = [f for f in files if kind in ("json", "csv") and not _has_content(f)]
    if empty:
        raise DatasetLoadError(f"{empty[0]}: split {split!r} is empty (no rows)")
    if kind == "arrow":
        return datasets.concatenate_datasets([datasets.Dataset.from_file(str(f)) for f in files])
    try:
        return datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train")
    except Exception as exc:  # noqa: BLE001 - datasets wraps a bad file in several error types
        cause = exc.__cause__ or exc
        raise DatasetLoadError(f"{', '.join(map(str, files))}: cannot read as {kind}: {cause}") from exc


def _has_content(file: Path) -> bool:
    """Whether a text file holds anything but whitespace (reads at most until the first such byte)."""
    with open(file, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def _absolute_image_paths(dataset, root: Path):
    import datasets

    columns = [
        c
        for c in media_columns(dataset.column_names)
        if not isinstance(dataset.features[c], (datasets.Image, datasets.Video))
    ]
    if not columns:
        return dataset
    return dataset.map(
        lambda row, i: {c: _absolute_path(row[c], root, i) for c in columns},
        with_indices=True,
        desc="resolving image paths",
    )
