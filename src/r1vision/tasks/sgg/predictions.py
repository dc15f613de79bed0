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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
