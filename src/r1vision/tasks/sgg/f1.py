"""F1 scores of a predicted scene graph, and the rewards built on them (``node_f1``, ``edge_f1``).

Recall-style rewards (``node``, ``edge``) pay for listing more: a model that emits every possible pair
loses nothing. F1 charges for wrong extras, so the best answer is exactly the ground truth:

- objects: one-to-one matching (Hungarian) of predicted to GT objects; a pair is a true positive when
  the normalised labels agree and the boxes overlap with IoU >= ``iou_threshold`` (model frame);
  ``object_f1 = 2 TP / (#pred + #gt)``;
- relations: a predicted triplet (deduplicated) is a true positive when its subject and object are
  true-positive objects whose GT counterparts carry the same (normalised) predicate in the GT graph;
  ``relation_f1`` likewise. Two empty sets score 1.
- ``exact``: both F1s are 1 (same objects, boxes within the threshold, same relations).

An unparsable answer scores 0 everywhere.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision.tasks.base import RewardFunc, RewardSpec
from r1vision.tasks.common import completion_text
from r1vision.tasks.sgg.boxes import BoxFrame, box_frame, pairwise_iou_giou
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate
from r1vision.tasks.sgg.matching import gt_graph
from r1vision.tasks.sgg.parse import ParseResult, parse_scene_graph
from r1vision.tasks.sgg.rewards import _column, _named, _size, format_reward


@dataclass(frozen=True)
class GraphF1:
    """F1 scores of one prediction and the counts behind them."""

    object_f1: float = 0.0
    relation_f1: float = 0.0
    object_tp: int = 0
    relation_tp: int = 0
    num_pred_objects: int = 0
    num_pred_relations: int = 0

    @property
    def exact(self) -> bool:
        return self.object_f1 == 1.0 and self.relation_f1 == 1.0


def _f1(tp: int, n_pred: int, n_gt: int) -> float:
    return 1.0 if n_pred + n_gt == 0 else 2.0 * tp / (n_pred + n_gt)


def graph_f1(
    parsed: ParseResult, objects: Any, relationships: Any, frame: BoxFrame, iou_threshold: float = 0.5
) -> GraphF1:
    """Object and relation F1 of a parsed answer against GT columns (boxes in original pixels)."""
    if not parsed.ok:
        return GraphF1()
    gt = gt_graph(objects, relationships)
    graph = parsed.graph
    n_pred, n_gt = len(graph.objects), len(gt.ids)
    pairs: dict[int, int] = {}  # pred index -> gt index, true positives only
    if n_pred and n_gt:
        scale = np.array([frame.width, frame.height, frame.width, frame.height])
        pred_boxes = np.asarray([frame.clip(o.box) for o in graph.objects], dtype=np.float64) / scale
        gt_boxes = np.asarray([frame.to_model(b) for b in gt.boxes], dtype=np.float64).reshape(-1, 4) / scale
        iou_m, _ = pairwise_iou_giou(pred_boxes, gt_boxes)
        same = np.array(
            [[normalize_object(o.name) == normalize_object(g) for g in gt.names] for o in graph.objects]
        )
        hit = same & (np.nan_to_num(iou_m) >= iou_threshold)
        # Maximise the number of true positives; IoU only breaks ties between equally many.
        rows, cols = linear_sum_assignment(-(hit + 1e-3 * np.nan_to_num(iou_m)))
        pairs = {int(r): int(c) for r, c in zip(rows, cols, strict=False) if hit[r, c]}
    object_f1 = _f1(len(pairs), n_pred, n_gt)

    gt_index = {gid: i for i, gid in enumerate(gt.ids)}
    gt_rels = {
        (gt_index[s], normalize_predicate(p), gt_index[o])
        for s, p, o in gt.relations
        if s in gt_index and o in gt_index
    }
    pred_index = {o.id: i for i, o in enumerate(graph.objects)}
    pred_rels = {
        (pred_index[r.subject], normalize_predicate(r.predicate), pred_index[r.object])
        for r in graph.relations
    }
    rel_tp = sum(
        1 for s, p, o in pred_rels if s in pairs and o in pairs and (pairs[s], p, pairs[o]) in gt_rels
    )
    relation_f1 = _f1(rel_tp, len(pred_rels), len(gt_rels))
    return GraphF1(object_f1, relation_f1, len(pairs), rel_tp, n_pred, len(pred_rels))


class F1Scorer:
    """Scores completions against GT columns as the reward functions see them; caches shared work."""

    def __init__(
        self,
        model_family: str,
        iou_threshold: float = 0.5,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        box_frame(model_family, (1, 1))  # fail fast on an unknown family
        self.model_family = model_family
        self.iou_threshold = iou_threshold
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self._cache: OrderedDict[tuple, GraphF1] = OrderedDict()
        self._cache_size = cache_size

    def score(
        self, text: str, objects: Any, relationships: Any, original_size: Any, image_size: Any
    ) -> GraphF1:
        """F1 scores of one completion text; 0s when the sizes or the answer are unusable."""
        key = (text, str(objects), str(relationships), str(original_size), str(image_size))
        if key in self._cache:
            return self._cache[key]
        orig, resized = _size(original_size), _size(image_size)
        orig = orig or resized
        if orig is None:
            value = GraphF1()
        else:
            frame = box_frame(self.model_family, orig, resized, self.min_pixels, self.max_pixels)
            value = graph_f1(parse_scene_graph(text), objects, relationships, frame, self.iou_threshold)
        self._cache[key] = value
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return value


def _f1_reward(scorer: F1Scorer, field: str) -> RewardFunc:
    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        objs, rels = _column(kwargs, "objects", n), _column(kwargs, "relationships", n)
        orig, sizes = _column(kwargs, "original_image_sizes", n), _column(kwargs, "image_sizes", n)
        out = []
        for i, c in enumerate(completions):
            try:
                out.append(
                    float(
                        getattr(scorer.score(completion_text(c), objs[i], rels[i], orig[i], sizes[i]), field)
                    )
                )
            except Exception:  # odd columns must not stop training; the row scores 0
                out.append(0.0)
        return out

    return _named(reward, field.replace("object_f1", "node_f1").replace("relation_f1", "edge_f1"))


F1_WEIGHTS = {"format": 1.0, "node_f1": 1.0, "edge_f1": 1.0}


def f1_rewards(
    model_family: str,
    *,
    weights: dict[str, float] | None = None,
    strict_format: bool = True,
    iou_threshold: float = 0.5,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> list[RewardSpec]:
    """``format``, ``node_f1`` and ``edge_f1`` rewards, each in [0, 1].

    ``strict_format=False`` uses the lenient format score (0.25 per check, see :func:`format_score`):
    with the strict one, a single relation naming an unlisted object zeroes the whole format reward, so
    under RL dropping relations can pay more than attempting them (demo, GRPO on 3-object prompts:
    relations per answer 0.86 -> 0.57 strict, 0.68 lenient). The F1 rewards judge content; lenient
    format charges such a dropped relation 0.25 instead of 1.
    """
    w = dict(F1_WEIGHTS)
    unknown = set(weights or {}) - set(w)
    if unknown:
        raise ValueError(f"unknown F1 reward(s) {sorted(unknown)}; known: {sorted(w)}")
    w.update(weights or {})
    scorer = F1Scorer(model_family, iou_threshold, min_pixels, max_pixels)

    funcs = {
        "format": format_reward(strict_format),
        "node_f1": _f1_reward(scorer, "object_f1"),
        "edge_f1": _f1_reward(scorer, "relation_f1"),
    }
    return [RewardSpec(name, func, w[name]) for name, func in funcs.items()]
