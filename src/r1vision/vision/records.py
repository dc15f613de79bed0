"""Prediction records on disk: one JSON object per line, appended and flushed as each one is done.

A run writes ``shard-<rank>.jsonl`` files in its output folder; a killed run is resumed by skipping
every ``index`` already present in any shard (so the world size may change between attempts). A line
cut by a kill is ignored on read and its row is simply generated again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line torn by a kill mid-write
                continue
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
