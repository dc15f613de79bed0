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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1vision.tasks.sgg.boxes import box_frame
from r1vision.tasks.sgg.parse import name_of, parse_scene_graph

Triplet = tuple[
    str, list[float], str, list[float], str, str, str
]  # s_name, s_box, o_name, o_box, pred, s_id, o_id


@dataclass
class PredGraph:
    """Predicted relations of one image in emission order; ``error`` set when the answer did not parse."""

    triplets: list[Triplet] = field(default_factory=list)
    error: str | None = None


def read_predictions(path: str | Path) -> dict[str, dict[str, Any]]:
    """Prediction records keyed by ``str(image_id)`` from a ``.jsonl`` (ours) or ``.json`` file (either)."""
    path = Path(path)
    records: dict[str, dict[str, Any]] = {}
    if path.is_dir():  # an `r1vision infer` output folder of shards
        from r1vision.vision.records import read_predictions as read_shards

        for item in read_shards(path):
            records[str(item.get("image_id", item.get("id", item["index"])))] = item
        return records
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl" or not text.lstrip().startswith(("{", "[")):
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON line ({exc})") from None
    else:
        data = json.loads(text)
        if isinstance(data, dict) and not ("completion" in data and "id" in data):
            return {
                str(k): dict(v, image_id=v.get("image_id", k)) for k, v in data.items() if isinstance(v, dict)
            }
        items = data if isinstance(data, list) else [data]
    for n, item in enumerate(items):
        key = item.get("image_id", item.get("id", item.get("index"))) if isinstance(item, dict) else None
        if key is None:
            raise ValueError(f"{path}: record {n} has no 'image_id'/'id'")
        records[str(key)] = item  # later lines win: a resumed run may have re-written an image
    return records


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
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> PredGraph:
    """Parse a completion and map its boxes from the model frame to original pixels."""
    parsed = parse_scene_graph(text)
    if not parsed.ok:
        return PredGraph(error=parsed.error)
    frame = box_frame(model_family, original_size, image_size, min_pixels, max_pixels)
    objs = {o.id: (o.name, frame.to_original(frame.clip(o.box))) for o in parsed.graph.objects}
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
        for r in parsed.graph.relations
    ]
    return PredGraph(triplets)


def _is_box(value: Any) -> bool:
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
        return PredGraph(error="r1sgg_placeholder")
    tuples = entry.get("relation_tuples")
    if tuples is not None:
        out = []
        for t in tuples:
            if isinstance(t, (list, tuple)) and len(t) >= 5 and _is_box(t[1]) and _is_box(t[3]):
                s, o = str(t[0]), str(t[2])
                out.append(
                    (
                        name_of(s),
                        [float(v) for v in t[1]],
                        name_of(o),
                        [float(v) for v in t[3]],
                        str(t[-1]),
                        s,
                        o,
                    )
                )
        return PredGraph(out)
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
                (name_of(ids[0]), [float(v) for v in boxes[si]], name_of(ids[1]), [float(v) for v in boxes[oi]],
                 predicates[best - 1], ids[0], ids[1])
            )  # fmt: skip
        except (TypeError, ValueError, IndexError):
            continue
    return PredGraph(out)


def to_pred_graph(
    record: Any,
    *,
    predicates: Sequence[str],
    objects: Sequence[str] = (),
    model_family: str | None = None,
    original_size: Any = None,
    image_size: Any = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> PredGraph:
    """Any prediction record (completion string, our record, R1-SGG entry) -> :class:`PredGraph`."""
    if isinstance(record, str):
        record = {"completion": record}
    if not isinstance(record, dict):
        raise ValueError(f"unsupported prediction record of type {type(record).__name__}")
    if "completion" not in record:
        return from_r1sgg(record, predicates, objects)
    family = record.get("model_family") or model_family
    orig = _size_of(record.get("original_image_size")) or _size_of(original_size)
    resized = _size_of(record.get("image_size")) or _size_of(image_size)
    image_id = record.get("image_id", record.get("id"))
    if family is None:
        raise ValueError(f"prediction for image {image_id!r}: model_family is needed to read its boxes")
    if orig is None:
        raise ValueError(
            f"prediction for image {image_id!r}: original image size unknown (no size in record or GT)"
        )
    text = record["completion"]
    if not isinstance(text, str):
        text = str(text)
    return from_completion(text, family, orig, resized, min_pixels, max_pixels)
