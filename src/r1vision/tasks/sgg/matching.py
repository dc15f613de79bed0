"""Ground-truth graphs in the model frame and Hungarian matching of predicted to ground-truth objects."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision.tasks import fastjson
from r1vision.tasks.sgg.boxes import BoxFrame, pairwise_iou_giou, pairwise_l1
from r1vision.tasks.sgg.labels import Similarity, similarity_matrix
from r1vision.tasks.sgg.parse import name_of


@dataclass(frozen=True)
class GTGraph:
    """Ground truth of one row: ids, names, original-pixel boxes (N x 4) and (s, p, o) id triplets."""

    ids: tuple[str, ...]
    names: tuple[str, ...]
    boxes: np.ndarray
    relations: tuple[tuple[str, str, str], ...]


def _as_list(value: Any) -> list:
    if isinstance(value, str):
        value = fastjson.loads(value) if value.strip() else []
    return list(value or [])


_ID, _BBOX, _SPO = itemgetter("id"), itemgetter("bbox"), itemgetter("subject", "predicate", "object")


@lru_cache(maxsize=8192)
def _gt_from_json(objects: str, relationships: str) -> GTGraph:
    return gt_graph(fastjson.loads(objects or "[]"), fastjson.loads(relationships or "[]"))


def gt_graph(objects: Any, relationships: Any) -> GTGraph:
    """Build a :class:`GTGraph` from dataset columns (JSON strings, cached, or already-decoded lists)."""
    if isinstance(objects, str) and (relationships is None or isinstance(relationships, str)):
        return _gt_from_json(objects, relationships or "[]")
    objs = _as_list(objects)
    rels = _as_list(relationships)
    # C-level maps, not Python loops: this runs once per GT row in every reward call
    ids = tuple(map(str, map(_ID, objs)))
    boxes = np.asarray(list(map(_BBOX, objs)), dtype=np.float64).reshape(-1, 4)
    triplets = tuple(map(_SPO, rels))
    if set(map(type, chain.from_iterable(triplets))) - {str}:  # str() only where it changes something
        triplets = tuple([(str(s), str(p), str(o)) for s, p, o in triplets])
    return GTGraph(ids, tuple(map(name_of, ids)), boxes, triplets)


@dataclass
class Matching:
    """Result of matching predictions (rows) to ground truth (columns) in the model frame."""

    pairs: list[tuple[int, int]]  # (pred index, gt index)
    label_sim: np.ndarray  # P x G
    iou: np.ndarray  # P x G
    l1: np.ndarray  # P x G, on [0, 1]-normalised boxes, range [0, 4]


def match_objects(
    pred_names: list[str],
    pred_boxes: np.ndarray,
    gt_names: list[str] | tuple[str, ...],
    gt_boxes: np.ndarray,
    frame: BoxFrame,
    sim: Similarity,
    w_label: float = 1.0,
    w_giou: float = 1.0,
    w_l1: float = 1.0,
) -> Matching:
    """Hungarian matching with cost ``w_label(1 - sim) + w_giou(1 - GIoU) + w_l1 * L1`` (boxes in model frame)."""
    p, g = len(pred_names), len(gt_names)
    if p == 0 or g == 0:
        empty = np.zeros((p, g))
        return Matching([], empty, empty, empty)
    scale = np.array([frame.width, frame.height, frame.width, frame.height])
    pn = np.asarray(pred_boxes, dtype=np.float64).reshape(-1, 4) / scale
    gn = np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4) / scale
    label_sim = similarity_matrix(pred_names, list(gt_names), sim)
    iou_m, giou_m = pairwise_iou_giou(pn, gn)  # IoU and GIoU are invariant to per-axis scaling
    l1_m = pairwise_l1(pn, gn)
    cost = w_label * (1.0 - label_sim) + w_giou * (1.0 - giou_m) + w_l1 * l1_m
    rows, cols = linear_sum_assignment(np.nan_to_num(cost, nan=1e6, posinf=1e6))
    return Matching([(int(r), int(c)) for r, c in zip(rows, cols, strict=False)], label_sim, iou_m, l1_m)
