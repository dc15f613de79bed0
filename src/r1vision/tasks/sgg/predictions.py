"""Read SGG predictions for evaluation: our ``predictions.jsonl`` and R1-SGG's ``sgg_pred_results.json``.

Both become :class:`PredGraph` — triplets in emission order with boxes in *original-image pixels*:

- ours: ``{"index", "id" | "image_id", "completion", ...}`` per line; the completion is parsed with
  :mod:`parse` and its boxes mapped back from the model frame with :mod:`boxes` (needs the model family and
  the image size: record keys ``model_family``, ``original_image_size``, ``image_size``, else arguments / GT);
- R1-SGG: a dict keyed by image_id with ``boxes``, ``labels``, ``names``, ``relation_tuples`` (each
  ``[subject_id, subject_box, object_id, object_box, predicate]``) and ``graph`` (``all_node_pairs``,
  one-hot ``all_relation`` over ``["__background__"] + predicates``). ``relation_tuples`` is preferred;
  without it the graph is decoded. Entries R1-SGG inserts for unparsable answers (one box labelled 0,
  named ``"unknown"``) count as parse failures.

Duplicate image ids: records that agree are collapsed; two *different* records for one image id are an
error naming the id and both places — the same rule for a folder of shards, a ``.jsonl`` and a ``.json``
file (a silent first-wins or last-wins rule changes R@50 depending on how the records were stored).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1vision.tasks.fastjson import is_document, loads
from r1vision.tasks.sgg.boxes import box_frame
from r1vision.tasks.sgg.parse import name_of, parse_scene_graph
from r1vision.tasks.sgg.r1sgg import gather
from r1vision.vision.budget import PixelBudget
from r1vision.vision.records import PredictionFileError

Triplet = tuple[
    str, list[float], str, list[float], str, str, str
]  # s_name, s_box, o_name, o_box, pred, s_id, o_id


@dataclass
class PredGraph:
    """Predicted relations (and objects) of one image in emission order, boxes in original pixels.

    ``error`` is set when the answer did not parse; ``placeholder`` when R1-SGG's gatherer would have
    replaced the answer by its placeholder (an answer shape it rejects, no object of the vocabulary), which
    R1-SGG's evaluator scores as an image with recall 0 (:mod:`.r1sgg`).
    """

    triplets: list[Triplet] = field(default_factory=list)
    error: str | None = None
    objects: list[tuple[str, list[float]]] = field(default_factory=list)  # (name, box)
    object_ids: list[str] = field(default_factory=list)  # parallel to ``objects``
    placeholder: bool = False


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

    def __getitem__(self, key: str) -> dict[str, Any]:
        f, _, offset, length = self._places[key]
        with open(self._files[f], "rb") as handle:
            handle.seek(offset)
            return loads(handle.read(length).decode("utf-8", errors="replace"))

    def __contains__(self, key: object) -> bool:
        return key in self._places

    def __iter__(self) -> Iterator[str]:
        return iter(self._places)

    def __len__(self) -> int:
        return len(self._places)


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


def _size_of(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        value = value[0]
    try:
        return float(value[0]), float(value[1])
    except (TypeError, IndexError, ValueError):
        return None


def from_completion(
    text: str,
    model_family: str,
    original_size: Sequence[float],
    image_size: Sequence[float] | None = None,
    budget: PixelBudget | None = None,
    r1sgg: bool = False,
    vocabulary: tuple[Sequence[str], Sequence[str]] = ((), ()),
) -> PredGraph:
    """Parse a completion and map its boxes from the model frame to original pixels.

    ``r1sgg=True`` reads it as R1-SGG's gatherer does (:mod:`.r1sgg`: its accepted answer shapes, objects
    and predicates of ``vocabulary`` = (objects, predicates) only, float boxes neither rounded nor clipped);
    an answer it rejects is a placeholder.
    """
    frame = box_frame(model_family, original_size, image_size, budget)
    if r1sgg:
        gathered = gather(text, frame, *vocabulary)
        if gathered is None:
            return PredGraph(error="r1sgg_rejected", placeholder=True)
        kept, names, relations = gathered
        triplets = [
            (kept[s][0], kept[s][1], kept[o][0], kept[o][1], p, names[s], names[o]) for s, o, p in relations
        ]
        return PredGraph(triplets, objects=kept, object_ids=names)
    parsed = parse_scene_graph(text)
    if not parsed.ok:
        return PredGraph(error=parsed.error)
    graph = parsed.graph
    objs = {o.id: (o.name, frame.to_original(frame.clip(o.box))) for o in graph.objects}
    triplets = [
        (
            objs[r.subject][0],
            objs[r.subject][1],
            objs[r.object][0],
            objs[r.object][1],
            r.predicate,
            r.subject,
            r.object,
        )
        for r in graph.relations
    ]
    return PredGraph(triplets, objects=list(objs.values()), object_ids=list(objs))


_NUMBERS = (int, float)


def _is_box(value: Any) -> bool:
    if type(value) is list and len(value) == 4:  # the common case, without a generator
        a, b, c, d = value
        if type(a) in _NUMBERS and type(b) in _NUMBERS and type(c) in _NUMBERS and type(d) in _NUMBERS:
            return True
    return (
        isinstance(value, (list, tuple))
        and len(value) == 4
        and all(isinstance(v, (int, float)) for v in value)
    )


def from_r1sgg(entry: dict[str, Any], predicates: Sequence[str], objects: Sequence[str] = ()) -> PredGraph:
    """Decode one value of R1-SGG's ``sgg_pred_results.json`` (see module docstring)."""
    names = list(entry.get("names") or [])
    labels = list(entry.get("labels") or [])
    if names == ["unknown"] and labels in ([0], [0.0]):
        return PredGraph(error="r1sgg_placeholder", placeholder=True)
    boxes_all = entry.get("boxes") or []
    if not names:  # class indices into the vocabulary (1-based; 0 is background)
        names = [
            objects[int(c) - 1] if 0 < int(c) <= len(objects) else "unknown"
            for c in labels
            if isinstance(c, (int, float))
        ]
    kept = [(str(n), b) for n, b in zip(names, boxes_all, strict=False) if _is_box(b)]
    objects_out = [(name_of(n), [float(v) for v in b]) for n, b in kept]
    object_ids = [n for n, _ in kept]
    tuples = entry.get("relation_tuples")
    if tuples is not None:
        out = []
        for t in tuples:
            if isinstance(t, (list, tuple)) and len(t) >= 5 and _is_box(t[1]) and _is_box(t[3]):
                s, o = str(t[0]), str(t[2])
                out.append(
                    (
                        name_of(s),
                        t[1],  # checked by _is_box: four numbers (arrays convert them later)
                        name_of(o),
                        t[3],
                        str(t[-1]),
                        s,
                        o,
                    )
                )
        return PredGraph(out, objects=objects_out, object_ids=object_ids)
    graph = entry.get("graph") or {}
    boxes = graph.get("pred_boxes", entry.get("boxes")) or []
    classes = graph.get("pred_boxes_class", labels) or []
    out = []
    for pair, onehot in zip(graph.get("all_node_pairs") or [], graph.get("all_relation") or [], strict=False):
        try:
            si, oi = int(pair[0]), int(pair[1])
            scores = [float(v) for v in onehot]
            best = max(range(1, len(scores)), key=lambda k: scores[k])
            if scores[best] <= 0 or best > len(predicates):
                continue
            ids = [names[si] if si < len(names) else None, names[oi] if oi < len(names) else None]
            for k, idx in enumerate((si, oi)):
                if ids[k] is None:
                    label = int(classes[idx])
                    ids[k] = f"{objects[label - 1]}.{idx}" if 0 < label <= len(objects) else f"object.{idx}"
            out.append(
                (
                    name_of(ids[0]),
                    [float(v) for v in boxes[si]],
                    name_of(ids[1]),
                    [float(v) for v in boxes[oi]],
                    predicates[best - 1],
                    ids[0],
                    ids[1],
                )
            )
        except (TypeError, ValueError, IndexError):
            continue
    return PredGraph(out, objects=objects_out, object_ids=object_ids)


# The fields of an entry of R1-SGG's gathered predictions (any one of them makes a record R1-SGG's).
_R1SGG_KEYS = frozenset({"names", "labels", "boxes", "graph", "relation_tuples"})


def to_pred_graph(
    record: Any,
    *,
    predicates: Sequence[str],
    objects: Sequence[str] = (),
    model_family: str | None = None,
    original_size: Any = None,
    image_size: Any = None,
    budget: PixelBudget | None = None,
    r1sgg: bool = False,
) -> PredGraph:
    """Any prediction record (completion string, our record, R1-SGG entry) -> :class:`PredGraph`."""
    if isinstance(record, str):
        record = {"completion": record}
    if not isinstance(record, dict):
        raise ValueError(f"unsupported prediction record of type {type(record).__name__}")
    if "completion" not in record:
        if not _R1SGG_KEYS & record.keys():  # our record, its completion lost: a failure, not an empty graph
            return PredGraph(error="no_completion")
        return from_r1sgg(record, predicates, objects)
    family = record.get("model_family") or model_family
    orig = _size_of(record.get("original_image_size")) or _size_of(original_size)
    resized = _size_of(record.get("image_size")) or _size_of(image_size)
    image_id = record.get("image_id", record.get("id"))
    if family is None:
        raise PredictionFileError(
            f"prediction for image {image_id!r}: model_family is needed to read its boxes"
        )
    if orig is None:
        raise PredictionFileError(
            f"prediction for image {image_id!r}: original image size unknown (no size in record or GT)"
        )
    text = record["completion"]
    if not isinstance(text, str):
        text = str(text)
    return from_completion(text, family, orig, resized, budget, r1sgg=r1sgg, vocabulary=(objects, predicates))
