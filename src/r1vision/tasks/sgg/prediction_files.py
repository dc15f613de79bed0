"""Reading SGG prediction files for evaluation, in memory flat in their size.

``read_predictions`` takes an ``r1vision infer`` folder, a ``.jsonl`` (ours) or a ``.json`` (ours, or
R1-SGG's gathered ``sgg_pred_results.json``) and returns a mapping image id -> record that decodes each
record when asked for it (:class:`LazyRecords`, :class:`LazyEntries`). :mod:`.predictions` turns records
into predicted graphs.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from r1vision.tasks.fastjson import is_document, loads
from r1vision.vision.records import PredictionFileError

_SPACE = re.compile(r"\s*")
# Where an object value may end: a closing brace followed by the separator of the enclosing object.
_OBJECT_END = re.compile(r"\}\s*[,}]")
_MAX_TRIES = 8


def _object_end(text: str, start: int) -> int | None:
    """End of the JSON object that starts at ``text[start]``, or None (not an object, or not found quickly).

    Decoding the whole gathered file to find each entry costs ~5x its text in memory, and decoding each
    entry with :mod:`json` only to find where it ends costs as much time as the evaluation's decoding
    itself. Instead, each ``}`` followed by ``,`` or ``}`` is a candidate end: the first candidate at which
    the text from ``start`` is one complete JSON object is the object's end (a parser reading from
    ``start`` stops at that brace whatever follows; orjson only rejects what :mod:`json` also rejects,
    except NaN/Infinity and lone surrogates, which just cost a fallback). A value not placed within a
    few candidates (nested objects, braces in strings) returns None and the caller decodes it with
    :mod:`json`, so the scan stays linear.
    """
    if text[start : start + 1] != "{":
        return None
    pos = start
    for _ in range(_MAX_TRIES):
        match = _OBJECT_END.search(text, pos)
        if match is None:
            return None
        end = match.start() + 1
        if is_document(text[start:end]):
            return end
        pos = end
    return None


class _Window:
    """The text a scanner walks, read from a file block by block (or given whole), and the offset in the
    file (bytes) or in the text (characters) of any position the scanner has reached.

    Consumed text is dropped now and then, so a file of any size is scanned in a few megabytes; byte
    offsets are counted by encoding only the text passed over (the file is read with ``newline=""``, so
    characters and bytes correspond exactly)."""

    BLOCK = 1 << 20

    def __init__(self, text: str | None = None, handle: Any = None) -> None:
        self.buf, self.handle, self.eof = text or "", handle, handle is None
        self.dropped = 0  # characters dropped before buf[0]
        self.mark_c, self.mark = 0, 0  # buf position and its file offset, counted so far

    def ensure(self, i: int, n: int) -> None:
        """Hold at least ``n`` characters after position ``i`` (fewer at the end of the file)."""
        while not self.eof and len(self.buf) - i < n:
            block = self.handle.read(self.BLOCK)
            if block:
                self.buf += block
            else:
                self.eof = True

    def offset(self, i: int) -> int:
        """The offset of ``buf[i]`` (``i`` never goes back): bytes for a file, characters for a text."""
        if self.handle is None:
            return self.dropped + i
        self.mark += len(self.buf[self.mark_c : i].encode("utf-8"))
        self.mark_c = i
        return self.mark

    def compact(self, i: int) -> int:
        """Drop the text before ``i`` once it is long; return where ``i`` now is."""
        if i < self.BLOCK:
            return i
        self.offset(i)
        self.buf, self.dropped, self.mark_c = self.buf[i:], self.dropped + i, 0
        return 0


class LazyEntries(Mapping):
    """R1-SGG's gathered JSON object (image id -> entry), decoded one image at a time on access.

    At VG150-val size the file holds ~10 KB of text per image; decoded all at once as Python lists and
    floats it takes ~5x that, and even the text alone grows with the dataset (1 GB at 100,000 images).
    Reading checks the syntax and the duplicate-id rule once, keeping only each entry's place: in the text
    given, or, from :meth:`from_file`, its byte span in the file, read again when the entry is asked for.
    """

    WINDOW = 1 << 20  # text held ahead of each entry: larger entries are retried with a larger window

    def __init__(self, text: str, source: str, *, _handle: Any = None, _path: Path | None = None) -> None:
        self._text = text if _handle is None else None
        self._fd: int | None = None
        self._spans: dict[str, tuple[int, int]] = {}
        self.other_keys: set[str] = set()  # keys whose value is not an object (then it is one record)
        if _path is not None:
            self._fd = os.open(_path, os.O_RDONLY)
        self._scan(_Window(text if _handle is None else None, _handle), source)

    @classmethod
    def from_file(cls, path: str | Path) -> LazyEntries:
        """Scan ``path`` in blocks; entries are read back from the file (memory flat in its size)."""
        with open(path, encoding="utf-8", newline="") as handle:
            return cls("", str(path), _handle=handle, _path=Path(path))

    def _read(self, span: tuple[int, int]) -> str:
        if self._fd is None:
            return self._text[span[0] : span[1]]  # type: ignore[index]
        return os.pread(self._fd, span[1] - span[0], span[0]).decode("utf-8")

    def _scan(self, win: _Window, source: str) -> None:
        decoder, ws = json.JSONDecoder(), _SPACE.match
        window = self.WINDOW
        win.ensure(0, window)
        first = win.buf.find("{")
        if first < 0:
            raise PredictionFileError(f"{source}: not a JSON object")
        i = ws(win.buf, first + 1).end()
        while True:
            i = win.compact(i)
            win.ensure(i, window)
            text = win.buf
            if i >= len(text) or text[i] == "}":
                break
            try:
                key, start, end, nxt, is_object = self._entry(text, i, source, decoder, ws)
            except ValueError:
                if win.eof:
                    raise
                window *= 2  # an entry longer than the window: read further and parse it again
                continue
            if not is_object:
                self.other_keys.add(key)
            elif key in self._spans:
                if self._read(self._spans[key]) != text[start:end]:
                    raise PredictionFileError(
                        f"image id {key!r} appears twice with different predictions in {source}"
                    )
            else:
                self._spans[key] = (win.offset(start), win.offset(end))
            i = nxt

    @staticmethod
    def _entry(text: str, i: int, source: str, decoder: Any, ws: Any) -> tuple[str, int, int, int, bool]:
        """One ``"key": value`` at ``text[i]``: key, value start and end, the next entry's start, and
        whether the value is an object."""
        if text[i] != '"':
            raise PredictionFileError(f"{source}: expected an image id at character {i}")
        key, i = json.decoder.scanstring(text, i + 1)
        i = ws(text, i).end()
        if text[i : i + 1] != ":":
            raise PredictionFileError(f"{source}: expected ':' after image id {key!r}")
        start = i = ws(text, i + 1).end()
        end, is_object = _object_end(text, i), True
        if end is None:  # not an object, or one the quick check cannot place: decode it
            value, end = decoder.raw_decode(text, i)
            is_object = isinstance(value, dict)
            del value
        nxt = ws(text, end).end()
        if text[nxt : nxt + 1] == ",":
            nxt = ws(text, nxt + 1).end()
        elif text[nxt : nxt + 1] != "}":
            raise PredictionFileError(f"{source}: expected ',' or '}}' at character {nxt}")
        return key, start, end, nxt, is_object

    def __getitem__(self, key: str) -> dict[str, Any]:
        value = loads(self._read(self._spans[key]))
        return dict(value, image_id=value.get("image_id", key))

    def __contains__(self, key: object) -> bool:  # Mapping's default would decode the entry
        return key in self._spans

    def __iter__(self) -> Iterator[str]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)  # type: ignore[arg-type]
            self._fd = None


class LazyRecords(Mapping):
    """Our prediction records (``infer`` shards, a ``.jsonl``) keyed by image id, decoded on access.

    Reading decodes each line once for its id and keeps only its place (file, byte offset, length), so
    memory stays flat in the number of records (a record holds the whole completion text). Damaged lines
    and duplicates follow :func:`~r1vision.vision.records.jsonl_lines` and the module docstring: a torn
    last line is skipped with a notice, another bad line is an error naming file and line, and two
    different records for one image id are an error naming both places.
    """

    def __init__(self, files: Sequence[Path]) -> None:
        self._files = list(files)
        self._fds: list[int] = []
        self._places: dict[str, tuple[int, int, int, int]] = {}  # id -> (file, line, offset, length)
        for f, path in enumerate(self._files):
            for line, offset, length, item in _jsonl_spans(path):
                place = f"{path}:{line}"
                key = (
                    item.get("image_id", item.get("id", item.get("index")))
                    if isinstance(item, dict)
                    else None
                )
                if key is None:
                    raise PredictionFileError(f"{place}: record has no 'image_id'/'id'")
                key = str(key)
                if key in self._places:
                    if _content(self[key]) != _content(item):
                        first = self._places[key]
                        raise PredictionFileError(
                            f"image id {key!r} has two different prediction records "
                            f"({self._files[first[0]]}:{first[1]} and {place}); "
                            "remove one (a re-run that wrote the image again?)"
                        )
                    continue
                self._places[key] = (f, line, offset, length)

    def _fd(self, f: int) -> int:
        while len(self._fds) <= f:  # opened once each, on first access (indexing reads them as text)
            self._fds.append(os.open(self._files[len(self._fds)], os.O_RDONLY))
        return self._fds[f]

    def __getitem__(self, key: str) -> dict[str, Any]:
        f, _, offset, length = self._places[key]
        return loads(os.pread(self._fd(f), length, offset).decode("utf-8", errors="replace"))

    def __contains__(self, key: object) -> bool:
        return key in self._places

    def __iter__(self) -> Iterator[str]:
        return iter(self._places)

    def __len__(self) -> int:
        return len(self._places)

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", []):
            os.close(fd)
        self._fds = []


def _jsonl_spans(path: Path) -> Iterator[tuple[int, int, int, Any]]:
    """``(line number, byte offset, byte length, value)`` of each non-empty line, with the damaged-line
    rule of :func:`~r1vision.vision.records.jsonl_lines`."""
    pending = None
    offset = number = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):  # noqa: B007 - the last number is reported after the loop
            start, offset = offset, offset + len(raw)
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            if pending is not None:
                raise PredictionFileError(f"{path}:{pending[0]}: not a JSON line ({pending[1]})")
            try:
                yield number, start, len(raw), loads(text)
            except ValueError as exc:
                pending = (number, exc)
    if pending is not None:
        logging.getLogger(__name__).warning(
            "%s:%d: skipped a torn last line (a run killed while writing it); that row counts as missing",
            path,
            pending[0],
        )


def read_predictions(path: str | Path) -> Mapping[str, dict[str, Any]]:
    """Prediction records keyed by ``str(image_id)`` from an ``r1vision infer`` folder, a ``.jsonl`` (ours)
    or a ``.json`` file (ours, or R1-SGG's ``sgg_pred_results.json``). See the module docstring on
    duplicates. Folders, ``.jsonl`` files and R1-SGG's file are read lazily (records decoded on access)."""
    path = Path(path)
    if path.is_dir():  # an `r1vision infer` output folder of shards
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise FileNotFoundError(f"no prediction records (*.jsonl) in {path}")
        return LazyRecords(files)
    with open(path, encoding="utf-8") as handle:
        head = handle.read(4096).lstrip()
    if path.suffix == ".jsonl" or not head.startswith(("{", "[")):
        return LazyRecords([path])
    lazy = LazyEntries.from_file(path) if head.startswith("{") else None
    if lazy is not None and not {"completion", "id"} <= lazy.other_keys:
        return lazy  # R1-SGG's gathered file: image id -> entry
    data = loads(path.read_text(encoding="utf-8"))
    items = ((f"{path}[{n}]", x) for n, x in enumerate(data if isinstance(data, list) else [data]))
    records: dict[str, dict[str, Any]] = {}
    where: dict[str, str] = {}
    for place, item in items:
        key = item.get("image_id", item.get("id", item.get("index"))) if isinstance(item, dict) else None
        if key is None:
            raise PredictionFileError(f"{place}: record has no 'image_id'/'id'")
        key = str(key)
        if key in records and _content(records[key]) != _content(item):
            raise PredictionFileError(
                f"image id {key!r} has two different prediction records ({where[key]} and {place}); "
                "remove one (a re-run that wrote the image again?)"
            )
        records.setdefault(key, item)
        where.setdefault(key, place)
    return records


def _content(record: dict[str, Any]) -> Any:
    """What decides a record's score (bookkeeping such as ``index`` or timings may differ)."""
    return {k: v for k, v in record.items() if k not in ("index", "seconds", "time", "rank")}
