"""Scene-graph rewards in TRL's convention ``f(prompts, completions, **columns) -> list[float]``.

All rewards lie in [0, 1] (group normalisation, when enabled, changes that; see :func:`with_group_norm`):

- ``format``: strict = 1 only for ``[<think>..</think>] <answer>{valid non-empty graph}</answer>`` with
  nothing else; lenient = 0.25 each for answer tags, decodable JSON, at least one object, no dropped
  object/relation.
- ``node``: Hungarian matching of predicted to GT objects (cost ``w_label(1-sim) + w_giou(1-GIoU) +
  w_l1·L1`` on [0, 1]-normalised model-frame boxes); mean label similarity over GT objects.
- ``box``: mean over GT objects of ``(IoU + exp(-L1)) / 2`` through the same matching.
- ``edge``: soft recall; a GT relation scores ``sim(predicate) · q(subject) · q(object)`` for the best
  predicted relation between the matched objects, ``q = label_sim · (IoU + exp(-L1)) / 2``.
- ``edge_hard``: share of GT relations for which some predicted relation has the same predicate and
  categories (after normalisation) with both IoUs >= 0.5.

Ground truth is converted to the model frame with :meth:`BoxFrame.to_model` — the function that writes
SFT targets — using the ``image_sizes`` / ``original_image_sizes`` columns the trainer adds.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from r1vision.tasks.base import RewardFunc, RewardSpec
from r1vision.tasks.common import column as _column
from r1vision.tasks.common import completion_text
from r1vision.tasks.common import named as _named
from r1vision.tasks.common import unit as _unit
from r1vision.tasks.group_filter import select_groups_by_std  # noqa: F401 - re-exported
from r1vision.tasks.sgg.boxes import BoxFrame, box_frame
from r1vision.tasks.sgg.labels import LabelSimilarity, Similarity, normalize_object, normalize_predicate
from r1vision.tasks.sgg.matching import gt_graph, match_objects
from r1vision.tasks.sgg.parse import ParseResult, parse_scene_graph

_STRICT_RE = re.compile(r"^\s*(<think>.*?</think>\s*)?<answer>.*?</answer>\s*$", re.S)
# Issues meaning some emitted object or relation was dropped (as opposed to packaging problems).
_CONTENT_ISSUES = {
    "invalid_object",
    "invalid_box",
    "non_numeric_box",
    "inverted_box",
    "non_finite_box",
    "duplicate_id",
    "invalid_relation",
    "unknown_id",
    "truncated_json",
    "too_many_objects",
    "too_many_relations",
}


def format_score(text: str, parsed: ParseResult, strict: bool = True, require_think: bool = False) -> float:
    """Format reward of one completion (see module docstring)."""
    if strict:
        if not parsed.ok or parsed.issues or not parsed.graph.objects:
            return 0.0
        m = _STRICT_RE.match(text)
        if m is None or (require_think and not m.group(1)):
            return 0.0
        return 1.0
    score = 0.25 * parsed.tagged
    if parsed.ok:
        score += 0.25
        score += 0.25 * bool(parsed.graph.objects)
        score += 0.25 * (not (set(parsed.issues) & _CONTENT_ISSUES))
    if require_think and not parsed.has_think:
        score *= 0.5
    return float(score)


@dataclass(frozen=True)
class GraphScores:
    node: float = 0.0
    box: float = 0.0
    edge: float = 0.0
    edge_hard: float = 0.0


def _size(entry: Any) -> tuple[float, float] | None:
    """``[w, h]`` or ``[[w, h], ...]`` (one per image: the first is used) -> (w, h)."""
    try:
        if entry is None:
            return None
        first = entry[0]
        if isinstance(first, (list, tuple)):
            first, second = first[0], first[1]
        else:
            second = entry[1]
        w, h = float(first), float(second)
        return (w, h) if w > 0 and h > 0 else None
    except (TypeError, IndexError, ValueError, KeyError):
        return None


class SGGScorer:
    """Computes node/box/edge scores of completions; caches results so the reward functions share work."""

    def __init__(
        self,
        model_family: str,
        *,
        w_label: float = 1.0,
        w_giou: float = 1.0,
        w_l1: float = 1.0,
        iou_threshold: float = 0.5,
        object_similarity: Similarity | None = None,
        predicate_similarity: Similarity | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        box_frame(model_family, (1, 1))  # fail fast on an unknown family
        self.model_family = model_family
        self.w_label, self.w_giou, self.w_l1 = w_label, w_giou, w_l1
        self.iou_threshold = iou_threshold
        self.object_sim = object_similarity or LabelSimilarity()
        self.predicate_sim = predicate_similarity or LabelSimilarity(head_credit=0.0, predicate=True)
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self._cache: OrderedDict[tuple, GraphScores] = OrderedDict()
        self._cache_size = cache_size
        self._warned = False

    def frame(self, original_size: Any, image_size: Any, gt_boxes: np.ndarray) -> BoxFrame:
        orig, resized = _size(original_size), _size(image_size)
        if orig is None and resized is not None:
            orig = resized  # no resize recorded: the model saw the original
        if orig is None:
            if not self._warned:
                warnings.warn(
                    "SGG rewards got no image sizes; treating GT boxes as model-frame", stacklevel=3
                )
                self._warned = True
            extent = float(gt_boxes.max()) if gt_boxes.size else 1.0
            return BoxFrame(
                "identity", max(extent, 1.0), max(extent, 1.0), max(extent, 1.0), max(extent, 1.0)
            )
        return box_frame(self.model_family, orig, resized, self.min_pixels, self.max_pixels)

    def score(
        self, text: str, objects: Any, relationships: Any, original_size: Any, image_size: Any
    ) -> GraphScores:
        key = (text, str(objects), str(relationships), str(original_size), str(image_size))
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        try:
            value = self._score(parse_scene_graph(text), objects, relationships, original_size, image_size)
        except Exception as exc:  # bad model text is handled in _score; this guards odd columns
            warnings.warn(
                f"SGG reward failed on a row ({type(exc).__name__}: {exc}); scoring 0", stacklevel=2
            )
            value = GraphScores()
        self._cache[key] = value
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return value

    def _score(
        self, parsed: ParseResult, objects: Any, relationships: Any, orig: Any, resized: Any
    ) -> GraphScores:
        gt = gt_graph(objects, relationships)
        if not parsed.ok:
            return GraphScores()
        graph = parsed.graph
        frame = self.frame(orig, resized, gt.boxes)
        gt_boxes = np.asarray([frame.to_model(b) for b in gt.boxes], dtype=np.float64).reshape(-1, 4)
        pred_boxes = np.asarray([frame.clip(o.box) for o in graph.objects], dtype=np.float64).reshape(-1, 4)
        pred_names = [o.name for o in graph.objects]
        n_gt = len(gt.ids)
        if n_gt == 0:
            node = box = float(not graph.objects)
        m = match_objects(
            pred_names,
            pred_boxes,
            gt.names,
            gt_boxes,
            frame,
            self.object_sim,
            self.w_label,
            self.w_giou,
            self.w_l1,
        )
        quality: dict[int, tuple[int, float]] = {}  # gt index -> (pred index, q)
        if n_gt:
            node_sum = box_sum = 0.0
            for pi, gi in m.pairs:
                box_term = 0.5 * (m.iou[pi, gi] + math.exp(-m.l1[pi, gi]))
                node_sum += m.label_sim[pi, gi]
                box_sum += box_term
                quality[gi] = (pi, m.label_sim[pi, gi] * box_term)
            node, box = node_sum / n_gt, box_sum / n_gt

        if not gt.relations:
            flag = float(not graph.relations)
            return GraphScores(_unit(node), _unit(box), flag, flag)
        gt_index = {gid: i for i, gid in enumerate(gt.ids)}
        pred_index = {o.id: i for i, o in enumerate(graph.objects)}
        by_pair: dict[tuple[int, int], list[str]] = {}
        for r in graph.relations:
            by_pair.setdefault((pred_index[r.subject], pred_index[r.object]), []).append(r.predicate)
        pred_triplets = [
            (normalize_object(graph.objects[pred_index[r.subject]].name), normalize_predicate(r.predicate),
             normalize_object(graph.objects[pred_index[r.object]].name), pred_index[r.subject], pred_index[r.object])
            for r in graph.relations
        ]  # fmt: skip
        iou_all = m.iou if m.iou.size else np.zeros((len(graph.objects), n_gt))
        soft = hard = 0.0
        for s, p, o in gt.relations:
            si, oi = gt_index.get(s), gt_index.get(o)
            if si is None or oi is None:
                continue
            if si in quality and oi in quality:
                (ps, qs), (po, qo) = quality[si], quality[oi]
                best = max((self.predicate_sim(pp, p) for pp in by_pair.get((ps, po), [])), default=0.0)
                soft += best * qs * qo
            key = (normalize_object(gt.names[si]), normalize_predicate(p), normalize_object(gt.names[oi]))
            for ns, np_, no, ps, po in pred_triplets:
                if (
                    (ns, np_, no) == key
                    and iou_all[ps, si] >= self.iou_threshold
                    and iou_all[po, oi] >= self.iou_threshold
                ):
                    hard += 1.0
                    break
        n_rel = len(gt.relations)
        return GraphScores(_unit(node), _unit(box), _unit(soft / n_rel), _unit(hard / n_rel))


def format_reward(strict: bool = True, require_think: bool = False, name: str = "format") -> RewardFunc:
    """Format reward function (strict or lenient), in [0, 1]."""

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            out.append(_unit(format_score(text, parse_scene_graph(text), strict, require_think)))
        return out

    return _named(reward, name)


def graph_reward(scorer: SGGScorer, field: str, name: str | None = None) -> RewardFunc:
    """Reward function returning ``field`` (``node``, ``box``, ``edge``, ``edge_hard``) of ``scorer``'s scores."""

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        objs, rels = _column(kwargs, "objects", n), _column(kwargs, "relationships", n)
        orig, sizes = _column(kwargs, "original_image_sizes", n), _column(kwargs, "image_sizes", n)
        return [
            getattr(scorer.score(completion_text(c), objs[i], rels[i], orig[i], sizes[i]), field)
            for i, c in enumerate(completions)
        ]

    return _named(reward, name or field)


# ---------------------------------------------------------------------------------------------------------
# Group normalisation, warm-up and group filtering.


def group_normalize(values: Sequence[float], group_size: int, eps: float = 1e-4) -> list[float]:
    """Z-score ``values`` within consecutive groups of ``group_size`` (R1-SGG's ``split_rewards``)."""
    arr = np.asarray(values, dtype=np.float64)
    out = np.zeros_like(arr)
    for start in range(0, len(arr), max(int(group_size), 1)):
        g = arr[start : start + group_size]
        out[start : start + group_size] = (g - g.mean()) / (g.std() + eps)
    return out.tolist()


def with_group_norm(func: RewardFunc, group_size: int) -> RewardFunc:
    """Normalise a reward within groups of ``group_size`` consecutive completions (one prompt's samples).

    Only valid when each call sees whole groups (TRL keeps a prompt's generations contiguous; make the
    per-device batch a multiple of ``num_generations``). Output range: about ``±sqrt(group_size - 1)``.
    """

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return group_normalize(func(prompts, completions, **kwargs), group_size)

    return _named(reward, func.__name__)


def warmup_factor(trainer_state: Any, warmup_steps: int) -> float:
    """``min(1, global_step / warmup_steps)``; 1 when no warm-up or no trainer state."""
    if warmup_steps <= 0 or trainer_state is None:
        return 1.0
    step = (
        trainer_state.get("global_step")
        if isinstance(trainer_state, dict)
        else getattr(trainer_state, "global_step", None)
    )
    if step is None:
        return 1.0
    return min(1.0, max(0.0, float(step) / float(warmup_steps)))


def with_warmup(func: RewardFunc, warmup_steps: int) -> RewardFunc:
    """Scale a reward linearly from 0 to 1 over the first ``warmup_steps`` optimiser steps."""

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        factor = warmup_factor(kwargs.get("trainer_state"), warmup_steps)
        return [factor * v for v in func(prompts, completions, **kwargs)]

    return _named(reward, func.__name__)


DEFAULT_WEIGHTS = {"format": 1.0, "node": 1.0, "box": 1.0, "edge": 1.0, "edge_hard": 0.0}


def make_rewards(
    model_family: str,
    *,
    weights: dict[str, float] | None = None,
    strict_format: bool = True,
    require_think: bool = False,
    group_size: int | None = None,
    warmup_steps: int = 0,
    warmup_rewards: Sequence[str] = ("node", "box", "edge", "edge_hard"),
    **scorer_kwargs: Any,
) -> list[RewardSpec]:
    """The SGG reward set for ``model_family``; ``scorer_kwargs`` go to :class:`SGGScorer`.

    ``group_size`` enables per-reward group normalisation; ``warmup_steps`` ramps ``warmup_rewards``.
    """
    w = dict(DEFAULT_WEIGHTS)
    unknown = set(weights or {}) - set(w)
    if unknown:
        raise ValueError(f"unknown SGG reward(s) {sorted(unknown)}; known: {sorted(w)}")
    w.update(weights or {})
    scorer = SGGScorer(model_family, **scorer_kwargs)
    funcs: dict[str, RewardFunc] = {"format": format_reward(strict_format, require_think)}
    for field in ("node", "box", "edge", "edge_hard"):
        funcs[field] = graph_reward(scorer, field)
    specs = []
    for name, func in funcs.items():
        low, high = 0.0, 1.0
        if warmup_steps and name in warmup_rewards:
            func = with_warmup(func, warmup_steps)
        if group_size:
            func = with_group_norm(func, group_size)
            low, high = -math.sqrt(max(group_size - 1, 1)), math.sqrt(max(group_size - 1, 1))
        specs.append(RewardSpec(name, func, w[name], low, high))
    return specs
