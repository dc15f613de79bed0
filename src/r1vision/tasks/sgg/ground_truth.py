"""Ground truth of reward rows in the model frame, converted for all new rows of a reward call at once.

A row's GT columns (JSON strings or decoded lists) become a :class:`RowTruth`: boxes rounded and clipped
into the model frame as :meth:`BoxFrame.to_model` writes SFT targets, [0, 1]-normalised boxes and their
areas for the matching geometry, integer codes of the normalised labels, and the relations whose ids
exist. The box arithmetic of all rows is one set of numpy calls on their concatenated boxes; every
operation is elementwise, so each row gets the values a conversion of that row alone gives.

Label codes live in one table per scorer: GT names, ``" " + head noun`` and ``"\\0" + predicate`` keys
(no collisions between the three kinds); ``""`` is -2 and a predicted label absent from the table gets
-1, which equals no GT code.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from r1vision.tasks.sgg.boxes import BoxFrame
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate
from r1vision.tasks.sgg.matching import GTGraph, gt_graph


class RowTruth(NamedTuple):
    """Ground truth of one row in the model frame, with everything the scores need precomputed."""

    frame: BoxFrame | None
    n: int
    names: tuple[str, ...]
    norm: tuple[str, ...]  # normalize_object of the names
    boxes: np.ndarray  # model-frame boxes (G x 4)
    scaled: np.ndarray  # boxes / frame extent (for IoU/GIoU/L1)
    rel_s: np.ndarray  # GT relations whose ids exist: subject index, object index, raw predicate
    rel_o: np.ndarray
    rel_p: tuple[str, ...]
    n_rel: int  # all GT relations, including ones naming unknown ids (they count in the denominator)
    f1_rels: frozenset  # {(s, normalised predicate, o)} for F1 (only rows converted with ``sized``)
    name_codes: np.ndarray  # codes of ``norm`` in the scorer's label table
    head_codes: np.ndarray  # codes of their head nouns (last word)
    pred_codes: np.ndarray  # codes of the normalised predicates of the known relations
    area: np.ndarray  # areas of ``scaled``


def codes(table: dict[str, int], labels: list[str] | tuple[str, ...]) -> np.ndarray:
    """Codes of ``labels`` in ``table``, adding the ones it lacks (numbered in order of appearance)."""
    found = list(map(table.get, labels))  # a C loop; GT vocabularies are small, so new labels are rare
    if None in found:
        setdefault = table.setdefault
        found = [setdefault(x, len(table)) if c is None else c for x, c in zip(labels, found, strict=True)]
    return np.array(found, dtype=np.int64)


def lookup(table: dict[str, int], labels: list[str]) -> np.ndarray:
    """Codes of ``labels`` in ``table``; -1 for the ones it lacks."""
    found = list(map(table.get, labels))
    if None in found:
        found = [-1 if c is None else c for c in found]
    return np.array(found, dtype=np.int64)


def pair_label_counts(
    groups: np.ndarray, subjects: np.ndarray, objects: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """For each relation, how many distinct labels the relations of its (group, subject, object) pair carry,
    as floats: the denominators of the edge rewards' rule for several predicates on one pair."""
    if not len(labels):
        return np.zeros(0)
    order = np.lexsort((labels, objects, subjects, groups))
    g, s, o, lab = groups[order], subjects[order], objects[order], labels[order]
    new_pair = np.empty(len(order), dtype=bool)
    new_pair[0] = True
    new_pair[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1]) | (o[1:] != o[:-1])
    new_label = new_pair.copy()
    new_label[1:] |= lab[1:] != lab[:-1]
    pair_id = np.cumsum(new_pair) - 1
    per_pair = np.bincount(pair_id, weights=new_label)
    out = np.empty(len(order))
    out[order] = per_pair[pair_id]
    return out


def copy_shares(ok: np.ndarray) -> np.ndarray:
    """Per GT object, the share of ``edge_hard`` credit a relation end gets when several predicted objects pass
    the label-and-IoU test ``ok`` (P x G) for it: ``min(1, m / k)``, ``k`` the predicted objects that pass for
    it, ``m`` the GT objects those stand for (itself included). Copies of one object share its credit, as
    several predicates on one pair share the pair's (:func:`pair_label_counts`); distinct GT objects that
    overlap keep full credit."""
    k = ok.sum(axis=0)
    out = np.ones(ok.shape[1])
    several = np.flatnonzero(k > 1)
    if len(several):  # rare in honest answers: the G x G reach is built only for these columns
        okf = ok.astype(np.float64)
        m = (okf[:, several].T @ okf > 0).sum(axis=1)
        out[several] = np.minimum(1.0, m / k[several])
    return out


@lru_cache(maxsize=65536)
def predicate_key(label: str) -> str:
    """The label-table key of a predicate (``"\\0"`` + its normalised form)."""
    return "\0" + normalize_predicate(label)


@lru_cache(maxsize=65536)
def head_key(label: str) -> str:
    """The label-table key of a normalised label's head noun (``" " + head``; ``""`` for no label)."""
    words = label.split()
    return " " + (words[-1] if words else "") if label else ""


# objects, relationships, original size, image size, sized, a hashable key of the two sizes
Row = tuple[Any, Any, Any, Any, bool, Any]
FrameOf = Callable[[Any, Any, bool, np.ndarray, Any], "BoxFrame | None"]


def convert_rows(rows: list[Row], frame_of: FrameOf, labels: dict[str, int]) -> list[RowTruth | Exception]:
    """The :class:`RowTruth` of each row, or the exception its columns raised (the caller reports it).

    ``frame_of(original size, image size, sized, GT boxes, size key)`` gives a row's frame (None: F1
    without sizes); ``labels`` is the scorer's label table, extended with the rows' labels.
    """
    out: list[Any] = [None] * len(rows)
    graphs: list[tuple[int, GTGraph, BoxFrame | None]] = []
    for k, (objects, relationships, orig, resized, sized, size_key) in enumerate(rows):
        try:
            gt = gt_graph(objects, relationships)
            graphs.append((k, gt, frame_of(orig, resized, sized, gt.boxes, size_key)))
        except Exception as exc:  # odd columns: the per-row path raises it again and warns
            out[k] = exc
    boxes, scaled, area = _model_frame_boxes([(gt, frame) for _, gt, frame in graphs])
    flat_norm = list(map(normalize_object, chain.from_iterable([gt.names for _, gt, _ in graphs])))
    name_codes = codes(labels, flat_norm)
    head_codes = codes(labels, list(map(head_key, flat_norm)))
    known = [_known_relations(gt) for _, gt, _ in graphs]
    pred_codes = codes(labels, list(map(predicate_key, chain.from_iterable([p for _, p, _ in known]))))
    all_s = np.array(list(chain.from_iterable([x[0] for x in known])), dtype=np.int64)
    all_o = np.array(list(chain.from_iterable([x[2] for x in known])), dtype=np.int64)
    begin = rel_begin = 0
    for (k, gt, frame), b, s, a, (rel_s, rel_p, rel_o) in zip(
        graphs, boxes, scaled, area, known, strict=True
    ):
        n = len(gt.ids)
        end, rel_end = begin + n, rel_begin + len(rel_p)
        out[k] = RowTruth(
            frame,
            n,
            gt.names,
            tuple(flat_norm[begin:end]),
            b,
            s,
            all_s[rel_begin:rel_end],
            all_o[rel_begin:rel_end],
            rel_p,
            len(gt.relations),
            # only the F1 scores need it (they ask with sized=True)
            frozenset(zip(rel_s, map(normalize_predicate, rel_p), rel_o, strict=True))
            if rows[k][4]
            else frozenset(),
            name_codes[begin:end],
            head_codes[begin:end],
            pred_codes[rel_begin:rel_end],
            a,
        )
        begin, rel_begin = end, rel_end
    return out


def _known_relations(gt: GTGraph) -> tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...]]:
    """(subject indices, predicates, object indices) of the GT relations whose ids exist, in order."""
    if not gt.relations:
        return (), (), ()
    if gt.known is not None:
        return gt.known
    get = dict(zip(gt.ids, range(len(gt.ids)), strict=True)).get  # a repeated id maps to its last index
    subjects, predicates, objects = zip(*gt.relations, strict=True)
    si, oi = tuple(map(get, subjects)), tuple(map(get, objects))
    if None not in si and None not in oi:  # the usual case: every relation names known ids
        return si, predicates, oi
    kept = [(s, p, o) for s, p, o in zip(si, predicates, oi, strict=True) if s is not None and o is not None]
    if not kept:
        return (), (), ()
    si, predicates, oi = zip(*kept, strict=True)
    return si, predicates, oi


def _model_frame_boxes(
    graphs: list[tuple[GTGraph, BoxFrame | None]],
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Each graph's (model-frame boxes, normalised boxes, their areas): zeros where there is no frame.

    :meth:`BoxFrame.to_model` vectorised over all rows: the same products, the same half-to-even
    rounding, the same clipping.
    """
    live = [(gt.boxes, f) for gt, f in graphs if f is not None and len(gt.ids)]
    if live:
        counts = [len(b) for b, _ in live]
        scale = np.repeat(np.array([[f.sx, f.sy, f.sx, f.sy] for _, f in live]), counts, axis=0)
        lim = np.repeat(np.array([[f.width, f.height, f.width, f.height] for _, f in live]), counts, axis=0)
        all_boxes = np.minimum(np.maximum(np.round(np.concatenate([b for b, _ in live]) * scale), 0), lim)
        all_scaled = all_boxes / lim
        all_area = (all_scaled[:, 2] - all_scaled[:, 0]) * (all_scaled[:, 3] - all_scaled[:, 1])
    boxes, scaled, area = [], [], []
    begin = 0
    for gt, f in graphs:
        n = len(gt.ids)
        if f is not None and n:
            end = begin + n
            boxes.append(all_boxes[begin:end])
            scaled.append(all_scaled[begin:end])
            area.append(all_area[begin:end])
            begin = end
        else:
            zero = np.zeros((n, 4))
            boxes.append(zero)
            scaled.append(zero)
            area.append((zero[:, 2] - zero[:, 0]) * (zero[:, 3] - zero[:, 1]))
    return boxes, scaled, area
