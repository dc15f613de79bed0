"""Write predictions in R1-SGG's gathered format (``sgg_pred_results.json``), so its evaluator can read ours.

One entry per predicted image, keyed by image id (what R1-SGG's ``sgg_gather_preds.py`` writes and
``vg150_eval.py`` reads): ``boxes`` (original pixels), ``labels`` (1-based vocabulary indices),
``scores`` (1.0: answers carry no confidence), ``names`` (object ids), ``relation_tuples``
(``[subject category, subject_box, object category, object_box, predicate]``) and ``graph`` (``all_node_pairs``,
one-hot ``all_relation`` over ``["__background__"] + predicates``, ``pred_boxes``, ``pred_boxes_class``,
``pred_boxes_score``). As in R1-SGG, objects outside the vocabulary and relations between them or with an
unknown predicate are dropped (R1-SGG first maps synonyms with WordNet; here labels are normalised with
:mod:`labels`), and an answer its gatherer would reject becomes its placeholder: one box labelled 0 named
``"unknown"`` with one dummy relation. Boxes are mapped to pixels as R1-SGG's gatherer maps them (floats,
neither rounded nor clipped); an object of a repeated name keeps its box, relations name the first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from r1vision.tasks.sgg.categories import load_vocabulary
from r1vision.tasks.sgg.evaluate import _gt_sizes, _iter_gt
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate
from r1vision.tasks.sgg.prediction_files import LazyEntries, LazyRecords, read_predictions
from r1vision.tasks.sgg.predictions import PredGraph, to_pred_graph
from r1vision.vision.budget import PixelBudget


def _placeholder(image_id: str, n_predicates: int) -> dict[str, Any]:
    box = [[0.0, 0.0, 1.0, 1.0]]
    return {
        "image_id": image_id,
        "boxes": box,
        "labels": [0],
        "scores": [0],
        "names": ["unknown"],
        "relation_tuples": [],
        "graph": {
            "all_node_pairs": [[0, 0]],
            "all_relation": [[0.0] * (n_predicates + 1)],
            "pred_boxes": box,
            "pred_boxes_class": [0],
            "pred_boxes_score": [0],
        },
    }


def r1sgg_entry(image_id: str, pred: PredGraph, objects: list[str], predicates: list[str]) -> dict[str, Any]:
    """The gathered-format entry of one image's :class:`PredGraph` (see the module docstring)."""
    if pred.placeholder:
        return _placeholder(image_id, len(predicates))
    obj_index = {normalize_object(o): i + 1 for i, o in enumerate(objects)}
    pred_index = {normalize_predicate(p): i + 1 for i, p in enumerate(predicates)}
    names, boxes, labels, position = [], [], [], {}
    for oid, (name, box) in zip(pred.object_ids, pred.objects, strict=False):
        label = obj_index.get(normalize_object(name))
        if label is None:
            continue
        position.setdefault(oid, len(names))  # a repeated name: relations name its first object
        names.append(oid)
        boxes.append([float(v) for v in box])
        labels.append(label)
    if not names:
        return _placeholder(image_id, len(predicates))
    pairs, onehots, tuples = [], [], []
    for s_category, sbox, o_category, obox, predicate, sid, oid in pred.triplets:
        k = pred_index.get(normalize_predicate(predicate))
        if k is None or sid not in position or oid not in position:
            continue
        pairs.append([position[sid], position[oid]])
        onehot = [0] * (len(predicates) + 1)
        onehot[k] = 1
        onehots.append(onehot)
        tuples.append(
            [s_category, [float(v) for v in sbox], o_category, [float(v) for v in obox], predicates[k - 1]]
        )
    scores = [1.0] * len(names)
    return {
        "image_id": image_id,
        "boxes": boxes,
        "labels": labels,
        "scores": scores,
        "names": names,
        "relation_tuples": tuples,
        "graph": {
            "all_node_pairs": pairs,
            "all_relation": onehots,
            "pred_boxes": boxes,
            "pred_boxes_class": labels,
            "pred_boxes_score": scores,
        },
    }


def export_r1sgg(
    gt_rows: Any,
    predictions: Any,
    out_path: str | Path,
    *,
    vocab: str = "vg150",
    model_family: str | None = None,
    budget: PixelBudget | None = None,
    split: str = "val",
) -> Path:
    """Write ``predictions`` (a path, or a dict keyed by image id) of the images in ``gt_rows`` as R1-SGG's
    ``sgg_pred_results.json``; returns the path. Images without a prediction record are left out."""

    vocabulary = load_vocabulary(vocab)
    objects, predicates = list(vocabulary.objects), list(vocabulary.predicates)
    if isinstance(predictions, (str, Path)):
        predictions = read_predictions(predictions)
    if not isinstance(predictions, (LazyEntries, LazyRecords)):
        predictions = {str(k): v for k, v in dict(predictions).items()}
    out: dict[str, Any] = {}
    for row in _iter_gt(gt_rows, split):
        image_id = str(row["image_id"])
        record = predictions.get(image_id)
        if record is None:
            continue
        needs_size = isinstance(record, str) or (isinstance(record, dict) and "completion" in record)
        orig, resized = _gt_sizes(row) if needs_size else (None, None)
        pred = to_pred_graph(
            record,
            predicates=predicates,
            objects=objects,
            model_family=model_family,
            original_size=orig,
            image_size=resized,
            budget=budget,
            r1sgg=True,
        )
        out[image_id] = r1sgg_entry(image_id, pred, objects, predicates)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out), encoding="utf-8")
    return path
