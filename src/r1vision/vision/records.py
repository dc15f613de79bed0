"""Prediction records on disk: one JSON object per line, appended and flushed as each one is done.

A run writes ``shard-<rank>.jsonl`` files in its output folder; a killed run is resumed by skipping
every ``index`` already present in any shard (so the world size may change between attempts). A line
cut by a kill is skipped on read with a warning and its row is simply generated again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class PredictionFileError(ValueError):
    """A prediction file that cannot be read as one: damaged lines, records without ids, conflicting
    duplicates, records that lack what scoring needs."""


class PredictionMismatchError(PredictionFileError):
    """Prediction records name other rows than the ground truth at the same index (e.g. another split)."""


def jsonl_lines(
    path: str | os.PathLike, loads: Callable[[str], Any] = json.loads
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-empty line of a JSON-lines file.

    A last line that does not decode is what a kill mid-write leaves: it is skipped with a warning (its row
    counts as missing, and ``infer`` generates it again). A line that does not decode anywhere else means
    the file was damaged or is not JSON lines: :class:`PredictionFileError` naming the file and line.
    """
    path = Path(path)
    with path.open(encoding="utf-8", errors="replace") as f:
        number, pending = 0, None  # a bad line is judged once we know whether anything follows it
        for number, line in enumerate(f, 1):  # noqa: B007 - the last number is reported after the loop
            if not line.strip():
                continue
            if pending is not None:
                raise PredictionFileError(f"{path}:{pending[0]}: not a JSON line ({pending[1]})")
            try:
                yield number, loads(line)
            except ValueError as exc:  # json.JSONDecodeError and orjson's error are ValueErrors
                pending = (number, exc)
        if pending is not None:
            logger.warning(
                "%s:%d: skipped a torn last line (a run killed while writing it); that row counts as missing",
                path,
                pending[0],
            )


def _iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    for _, record in jsonl_lines(path):
        if isinstance(record, dict) and "index" in record:
            yield record


def row_id(row: dict[str, Any], index: int) -> Any:
    """The id a record carries for dataset row ``index``: its ``id``, else ``image_id``, else the index."""
    for key in ("id", "image_id"):
        if row.get(key) is not None:
            return row[key]
    return index


def read_predictions(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of a prediction file or folder of shards, deduplicated by ``index``, sorted."""
    p = Path(path)
    files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    if not files or not all(f.exists() for f in files):
        raise FileNotFoundError(f"no prediction records at {p}")
    records: dict[int, dict[str, Any]] = {}
    for f in files:
        for record in _iter_lines(f):
            records.setdefault(int(record["index"]), record)
    return [records[i] for i in sorted(records)]


class RecordWriter:
    """Appends records to ``<out_dir>/shard-<rank>.jsonl``; knows which indices are already done."""

    def __init__(self, out_dir: str | os.PathLike, rank: int = 0) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"shard-{rank:05d}.jsonl"
        self._repair()
        self.done: set[int] = set()
        for f in self.dir.glob("shard-*.jsonl"):
            self.done.update(int(r["index"]) for r in _iter_lines(f))

    def _repair(self) -> None:
        """Drop a trailing partial line left by a kill, so new records start on a line of their own."""
        if self.path.exists() and self.path.stat().st_size:
            data = self.path.read_bytes()
            if not data.endswith(b"\n"):
                self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done.add(int(record["index"]))


@dataclass
class AlignedPredictions:
    """Predictions lined up with ground-truth rows: one entry per row (its ``samples`` list, else its
    ``completion``, else ``""``), how many rows have no record, and how many records carry no completion
    (counted as failures, not silently scored)."""

    completions: list[Any]
    missing: int
    without_completion: int


def align_predictions(
    rows: Sequence[Any], pred: str | os.PathLike, gt: str = "the ground truth"
) -> AlignedPredictions:
    """The records of ``pred`` aligned with ``rows`` by their ``index``.

    Records carry the id of the row they answer (``id``, else ``image_id``); a record whose id differs
    from the ground-truth row at its index, or an index past the last row, raises
    :class:`PredictionMismatchError` naming both, so predictions of one split are never scored against
    another. Several samples per row (``infer --num_samples``) are passed as a list (pass@k).
    """
    by_index = {int(r["index"]): r for r in read_predictions(pred)}
    check_ids(rows, by_index, gt, str(pred))
    completions, missing, empty = [], 0, 0
    for i in range(len(rows)):
        record = by_index.get(i)
        if record is None:
            missing += 1
            completions.append("")
            continue
        value = record.get("samples") or record.get("completion")
        if not isinstance(value, (str, list)) or not value:
            empty += 1
            value = ""
        completions.append(value)
    if empty:
        logger.warning("%s: %d record(s) carry no completion; they count as failures", pred, empty)
    return AlignedPredictions(completions, missing, empty)


def check_ids(rows: Sequence[Any], by_index: dict[int, dict[str, Any]], gt: str, pred: str) -> None:
    """Raise :class:`PredictionMismatchError` when records fall outside ``rows`` or name other rows."""
    extra = sorted(i for i in by_index if i >= len(rows))
    if extra:
        raise PredictionMismatchError(
            f"{pred}: {len(extra)} record(s) have an index beyond the {len(rows)} ground-truth rows of {gt} "
            f"(first: {extra[0]}); were the predictions made on another split?"
        )
    for i, record in sorted(by_index.items()):
        if "id" not in record:
            continue
        expected = row_id(rows[i], i)
        if str(record["id"]) != str(expected):
            raise PredictionMismatchError(
                f"{pred}: the record at index {i} answers row id {record['id']!r}, but ground-truth row {i} "
                f"of {gt} has id {expected!r}; were the predictions made on another split?"
            )
