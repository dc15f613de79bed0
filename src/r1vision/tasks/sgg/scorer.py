"""One scorer for every SGG reward: soft matching scores (``node``/``box``/``edge``/``edge_hard``) and F1.

Work shared by the rewards of one completion is done once: the completion is parsed once (cache keyed by
its text), the ground truth of a row is converted to the model frame once (cache keyed by the columns),
and each score set is cached per (text, row). Label comparisons run on integer codes of normalised labels
(:mod:`ground_truth`). :meth:`SGGScorer.score_many`, what the reward functions call, scores the new rows
of a call together: their ground truth is converted in one go (:mod:`ground_truth`) and their matching
and relation scores are flat array operations over all rows (:mod:`batch`); :meth:`SGGScorer._score` is
the per-row reference they equal. Summations keep the order of the straightforward loops, so values are
bit-identical to them (``tests/tasks/sgg/test_scorer.py``).

Scores (all in [0, 1]; see :mod:`rewards` and :mod:`f1` for the definitions):

- :meth:`SGGScorer.score` -> :class:`GraphScores` (Hungarian matching on label/GIoU/L1 cost);
- :meth:`SGGScorer.f1` -> :class:`GraphF1` (matching that maximises label-and-IoU true positives).
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision.tasks.common import unit as _unit
from r1vision.tasks.sgg.boxes import BoxFrame, box_frame
from r1vision.tasks.sgg.ground_truth import (
    RowTruth,
    convert_rows,
    copy_shares,
    head_key,
    lookup,
    pair_label_counts,
    predicate_key,
)
from r1vision.tasks.sgg.ground_truth import codes as _codes
from r1vision.tasks.sgg.labels import LabelSimilarity, Similarity, normalize_object, normalize_predicate
from r1vision.tasks.sgg.matching import gt_graph
from r1vision.tasks.sgg.parse import ParseResult, parse_scene_graph
from r1vision.tasks.sgg.scores import GraphF1, GraphScores
from r1vision.vision.budget import PixelBudget


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


def _f1(tp: int, n_pred: int, n_gt: int) -> float:
    return 1.0 if n_pred + n_gt == 0 else 2.0 * tp / (n_pred + n_gt)


def _geometry(a: np.ndarray, b: np.ndarray, area_b: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """IoU, GIoU and L1 matrices of boxes ``a`` (P x 4) and ``b`` (G x 4), or of batches (B x P x 4, B x G x 4).

    :func:`boxes.iou`, :func:`boxes.giou` and :func:`boxes.l1` for every pair at once (the golden test
    holds the values to the loop implementation's), with x and y handled together. Every
    value is an elementwise function of one (pred, GT) pair, so a padded batch gives each item's values.
    """
    lo, hi = a[..., :, None, :2], a[..., :, None, 2:]
    blo, bhi = b[..., None, :, :2], b[..., None, :, 2:]
    wh = np.maximum(np.minimum(hi, bhi) - np.maximum(lo, blo), 0.0)
    inter = wh[..., 0] * wh[..., 1]
    if area_b is None:
        area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    union = ((a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1]))[..., :, None] + area_b[..., None, :] - inter
    # x / inf = 0 stands in for "0 where the denominator is not positive" (no warnings, same values)
    iou = inter / np.where(union > 0, union, np.inf)
    span = np.maximum(hi, bhi) - np.minimum(lo, blo)
    hull = span[..., 0] * span[..., 1]
    giou = iou - (hull - union) / np.where(hull > 0, hull, np.inf)
    l1 = np.abs(a[..., :, None, :] - b[..., None, :, :]).sum(-1)
    return iou, giou, l1


class _LRU(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


class SGGScorer:
    """Scores completions against ground-truth columns as TRL's reward functions receive them."""

    def __init__(
        self,
        model_family: str,
        *,
        w_label: float = 1.0,
        w_giou: float = 1.0,
        w_l1: float = 1.0,
        box_iou_weight: float = 1.0,
        box_l1_weight: float = 1.0,
        iou_threshold: float = 0.5,
        object_similarity: Similarity | None = None,
        predicate_similarity: Similarity | None = None,
        budget: PixelBudget | None = None,
        cache_size: int = 4096,
    ) -> None:
        box_frame(model_family, (1, 1))  # fail fast on an unknown family
        if box_iou_weight < 0 or box_l1_weight < 0 or box_iou_weight + box_l1_weight <= 0:
            raise ValueError("box_iou_weight and box_l1_weight must be >= 0 with a positive sum")
        self.model_family = model_family
        self.w_label, self.w_giou, self.w_l1 = w_label, w_giou, w_l1
        self.box_iou_weight, self.box_l1_weight = float(box_iou_weight), float(box_l1_weight)
        self.iou_threshold = iou_threshold
        self.object_sim = object_similarity or LabelSimilarity()
        self.predicate_sim = predicate_similarity or LabelSimilarity(head_credit=0.0, predicate=True)
        self.budget = budget
        self._parsed = _LRU(cache_size)
        self._gt = _LRU(max(64, cache_size // 4))
        self._scores = _LRU(cache_size)
        self._f1 = _LRU(cache_size)
        self._frames: dict[tuple, BoxFrame | None] = {}  # (sizes key, sized) -> frame
        # Codes of GT labels (names, " " + head nouns, "\0" + predicates: one table, no collisions);
        # predicted labels are looked up, and absent ones get -1, which equals no GT code.
        self._labels: dict[str, int] = {"": -2}
        self._warned = False

    # -- shared pieces ------------------------------------------------------------------------------------

    def parse(self, text: str) -> ParseResult:
        """:func:`parse_scene_graph` of ``text``, parsed once however many rewards ask."""
        parsed = self._parsed.get(text)
        if parsed is None:
            parsed = self._parsed.put(text, parse_scene_graph(text))
        else:
            self._parsed.move_to_end(text)
        return parsed

    def frame(self, original_size: Any, image_size: Any, gt_boxes: np.ndarray) -> BoxFrame:
        """The model frame of a row; without sizes, GT boxes are taken as model-frame (with a warning)."""
        orig, resized = _size(original_size), _size(image_size)
        if orig is None and resized is not None:
            orig = resized  # no resize recorded: the model saw the original
        if orig is None:
            if not self._warned:
                warnings.warn(
                    "SGG rewards got no image sizes; treating GT boxes as model-frame", stacklevel=3
                )
                self._warned = True
            extent = max(float(gt_boxes.max()) if gt_boxes.size else 1.0, 1.0)
            return BoxFrame("identity", extent, extent, extent, extent)
        return box_frame(self.model_family, orig, resized, self.budget)

    def _frame_of(
        self, orig: Any, resized: Any, sized: bool, gt_boxes: np.ndarray, size_key: Any
    ) -> BoxFrame | None:
        """A row's frame for :meth:`score` (``sized=False``) or :meth:`f1`; ``size_key`` keys a memo."""
        hit = self._frames.get((size_key, sized), self._frames)
        if hit is not self._frames:
            return hit
        if sized:  # F1 needs real sizes: no identity fallback
            o, r = _size(orig), _size(resized)
            o = o or r
            frame = box_frame(self.model_family, o, r, self.budget) if o else None
        else:
            frame = self.frame(orig, resized, gt_boxes)
        if frame is None or frame.kind != "identity":  # an identity frame depends on the GT boxes
            if len(self._frames) >= 4096:
                self._frames.clear()
            self._frames[size_key, sized] = frame
        return frame

    def _ground_truth(
        self, objects: Any, relationships: Any, orig: Any, resized: Any, sized: bool
    ) -> RowTruth:
        """One row's ground truth in the model frame (cached by its columns); raises on odd columns."""
        key = (_key(objects), _key(relationships), _key(orig), _key(resized), sized)
        value = self._ground_truths([key], [(objects, relationships, orig, resized, sized, key[2:4])])[0]
        if isinstance(value, Exception):
            raise value
        return value

    def _ground_truths(self, keys: list[tuple], rows: list[tuple]) -> list[RowTruth | Exception]:
        """The ground truth of each row (cached by ``keys``; the new ones converted together), or the
        exception its columns raised."""
        out: list[Any] = [self._gt.get(k) for k in keys]
        if len(self._labels) > 200_000 and None in out:  # GT vocabularies are small: this bounds a
            self._labels.clear()  # pathological one; cached rows hold codes of the old table
            self._labels[""] = -2
            self._gt.clear()
            out = [None] * len(keys)
        todo: dict[tuple, list[int]] = {}
        for i, value in enumerate(out):
            if value is None:
                todo.setdefault(keys[i], []).append(i)
        if todo:
            new = convert_rows([rows[ix[0]] for ix in todo.values()], self._frame_of, self._labels)
            for (key, ix), value in zip(todo.items(), new, strict=True):
                if not isinstance(value, Exception):
                    self._gt.put(key, value)
                for i in ix:
                    out[i] = value
        return out

    def _label_sim(self, pred_names: list[str], pred_norm: list[str], gt: RowTruth) -> np.ndarray:
        sim = self.object_sim
        if type(sim) is not LabelSimilarity or sim._norm is not normalize_object:
            from r1vision.tasks.sgg.labels import similarity_matrix

            return similarity_matrix(pred_names, list(gt.names), sim)
        same = lookup(self._labels, pred_norm)[:, None] == gt.name_codes[None, :]
        if not sim.head_credit:
            return same.astype(np.float64)
        hp = lookup(self._labels, [head_key(x) for x in pred_norm])
        head = (hp[:, None] == gt.head_codes[None, :]) & (hp[:, None] >= 0)
        return np.where(same, 1.0, np.where(head, sim.head_credit, 0.0))

    # -- soft scores --------------------------------------------------------------------------------------

    def score(
        self, text: str, objects: Any, relationships: Any, original_size: Any, image_size: Any
    ) -> GraphScores:
        """Soft scores of one completion; zeros for an unusable answer or odd columns (never raises)."""
        key = (text, _key(objects), _key(relationships), _key(original_size), _key(image_size))
        return self._score_keyed(key, text, objects, relationships, original_size, image_size, None)

    def score_many(
        self, texts: list[str], objects: list, relationships: list, original_sizes: list, image_sizes: list
    ) -> list[GraphScores]:
        """:meth:`score` of every row of one reward call; the new rows are scored together (:mod:`batch`)."""
        rows = list(zip(texts, objects, relationships, original_sizes, image_sizes, strict=True))
        keys = [(t, _key(o), _key(r), _key(a), _key(b)) for t, o, r, a, b in rows]
        found = list(map(self._scores.get, keys))
        if None not in found:  # the second and later rewards of a call: every row is scored already
            return found
        todo: dict[tuple, int] = {}
        for i, key in enumerate(keys):
            if found[i] is None and key not in todo:
                todo[key] = i
        geo: dict[int, tuple] = {}
        if todo and type(self.object_sim) is LabelSimilarity and self.object_sim._norm is normalize_object:
            from r1vision.tasks.sgg import batch  # it builds on this module's helpers

            parsed = [(i, self.parse(rows[i][0])) for i in todo.values()]
            usable = [i for i, p in parsed if p.ok]  # the others score 0 on the per-row path
            gts = dict(
                zip(
                    usable,
                    self._ground_truths(
                        [(*keys[i][1:], False) for i in usable],
                        [(*rows[i][1:], False, keys[i][3:]) for i in usable],
                    ),
                    strict=True,
                )
            )
            prepared = [(i, p, gts[i]) for i, p in parsed if p.ok]
            psim = self.predicate_sim
            if type(psim) is LabelSimilarity and not psim.head_credit and psim._norm is normalize_predicate:
                for i, value in batch.batch_scores(self, prepared).items():
                    self._scores.put(keys[i], value)
            else:
                geo = batch.batch_geometry(self, prepared)
        return [
            value if value is not None else self._score_keyed(keys[i], *rows[i], geo.get(i))
            for i, value in enumerate(found)
        ]

    def _score_keyed(
        self, key: tuple, text: str, objects: Any, relationships: Any, orig: Any, resized: Any, geo: Any
    ) -> GraphScores:
        hit = self._scores.get(key)
        if hit is not None:
            return hit
        try:
            value = self._score(self.parse(text), objects, relationships, orig, resized, geo)
        except Exception as exc:  # bad model text is handled by the parser; this guards odd columns
            warnings.warn(
                f"SGG reward failed on a row ({type(exc).__name__}: {exc}); scoring 0", stacklevel=3
            )
            value = GraphScores()
        return self._scores.put(key, value)

    def _score(
        self, parsed: ParseResult, objects: Any, relationships: Any, orig: Any, resized: Any, geo: Any = None
    ) -> GraphScores:
        if not parsed.ok:
            gt_graph(objects, relationships)  # odd GT columns still warn, as they always did
            return GraphScores()
        gt = self._ground_truth(objects, relationships, orig, resized, sized=False)
        graph = parsed.graph
        n_pred, n_gt = len(graph.objects), gt.n
        pred_names = [o.name for o in graph.objects]
        pred_norm = [normalize_object(x) for x in pred_names]
        node = box = float(not graph.objects) if n_gt == 0 else 0.0
        match = np.full(n_gt, -1, dtype=np.int64)  # gt index -> matched pred index
        quality = np.zeros(n_gt)
        iou_m = np.zeros((n_pred, n_gt))
        if n_pred and n_gt:
            if geo is None:
                geo = self._geometry_of(graph, pred_names, pred_norm, gt)
            label_sim, iou_m, l1_m, cost = geo
            rows, cols = linear_sum_assignment(cost)
            a, b = self.box_iou_weight, self.box_l1_weight
            node_sum = box_sum = 0.0
            q = []
            exp = math.exp
            for s, i, d in zip(
                label_sim[rows, cols].tolist(),
                iou_m[rows, cols].tolist(),
                l1_m[rows, cols].tolist(),
                strict=True,
            ):
                term = 0.5 * (i + exp(-d)) if a == b else (a * i + b * exp(-d)) / (a + b)
                node_sum += s
                box_sum += term
                q.append(s * term)
            match[cols], quality[cols] = rows, q  # one scatter each instead of per-pair item writes
            node, box = node_sum / n_gt, box_sum / n_gt
        if gt.n_rel == 0:
            flag = float(not graph.relations)
            return GraphScores(_unit(node), _unit(box), flag, flag)
        if not graph.relations or not len(gt.rel_s):
            return GraphScores(_unit(node), _unit(box), 0.0, 0.0)
        pred_index = {o.id: i for i, o in enumerate(graph.objects)}
        ps = np.array([pred_index[r.subject] for r in graph.relations], dtype=np.int64)
        po = np.array([pred_index[r.object] for r in graph.relations], dtype=np.int64)
        keys = [predicate_key(r.predicate) for r in graph.relations]
        pp = lookup(self._labels, keys)
        gp = gt.pred_codes
        # Several predicates on one pair: each hit is worth min(1, g / k), g the GT predicates of the GT
        # pair, k the distinct predicates the answer lists for its pair (so listing every predicate for a
        # pair earns g / k, not full credit, while as many predicates as the GT has still earn 1).
        key_ids = {}
        kp = pair_label_counts(
            np.zeros_like(ps), ps, po, np.array([key_ids.setdefault(k, len(key_ids)) for k in keys])
        )
        gm = pair_label_counts(np.zeros_like(gt.rel_s), gt.rel_s, gt.rel_o, gp)
        share = np.minimum(1.0, gm[None, :] / kp[:, None])
        # soft: the best predicted predicate between the objects matched to a GT relation's ends
        ms, mo = match[gt.rel_s], match[gt.rel_o]
        # ps/po are never -1, so equality with ms/mo already means both GT ends are matched
        pair = (ps[:, None] == ms[None, :]) & (po[:, None] == mo[None, :])
        same_p = pp[:, None] == gp[None, :]
        psim_default = type(self.predicate_sim) is LabelSimilarity and not self.predicate_sim.head_credit
        if psim_default and self.predicate_sim._norm is normalize_predicate:
            best = np.where(pair & same_p, share, 0.0).max(axis=0)
        else:
            psim = np.array([[self.predicate_sim(r.predicate, p) for p in gt.rel_p] for r in graph.relations])
            best = np.where(pair, psim * share, 0.0).max(axis=0)
        soft = 0.0
        # Python floats: the same IEEE products as numpy scalars, without per-element indexing costs
        bl, qs, qo = best.tolist(), quality[gt.rel_s].tolist(), quality[gt.rel_o].tolist()
        for j, v in enumerate(bl):
            if v:
                soft += v * qs[j] * qo[j]
        # hard: same normalised labels and both IoUs above the threshold; (label and IoU) is decided per
        # object pair first, then gathered for the relations' ends
        names = lookup(self._labels, pred_norm)
        ok = (iou_m >= self.iou_threshold) & (names[:, None] == gt.name_codes[None, :])
        hit = same_p & ok[ps[:, None], gt.rel_s] & ok[po[:, None], gt.rel_o]
        copies = copy_shares(ok)  # copies of one object share its credit (1.0 each without copies)
        worth = np.where(hit, share, 0.0).max(axis=0) * copies[gt.rel_s] * copies[gt.rel_o]
        hard = 0.0
        for v in worth.tolist():  # added in order, as the batched paths do
            hard += v
        n_rel = gt.n_rel
        return GraphScores(_unit(node), _unit(box), _unit(soft / n_rel), _unit(hard / n_rel))

    def _geometry_of(self, graph: Any, pred_names: list[str], pred_norm: list[str], gt: RowTruth) -> tuple:
        """(label similarity, IoU, L1, matching cost) of one row's predicted vs GT objects."""
        frame = gt.frame
        lim = np.array([frame.width, frame.height, frame.width, frame.height])
        pred = np.array([o.box for o in graph.objects], dtype=np.float64)
        pred = np.minimum(np.maximum(pred, 0.0), lim) / lim  # BoxFrame.clip, then normalise
        label_sim = self._label_sim(pred_names, pred_norm, gt)
        iou_m, giou_m, l1_m = _geometry(pred, gt.scaled, gt.area)
        cost = self.w_label * (1.0 - label_sim) + self.w_giou * (1.0 - giou_m) + self.w_l1 * l1_m
        if not math.isfinite(cost.sum()):  # only a plugged-in similarity can make it so
            cost = np.nan_to_num(cost, nan=1e6, posinf=1e6)
        return label_sim, iou_m, l1_m, cost

    # -- F1 -----------------------------------------------------------------------------------------------

    def f1(self, text: str, objects: Any, relationships: Any, original_size: Any, image_size: Any) -> GraphF1:
        """Object/relation F1 of one completion; zeros when the sizes or the answer are unusable."""
        key = (text, _key(objects), _key(relationships), _key(original_size), _key(image_size))
        hit = self._f1.get(key)
        if hit is not None:
            return hit
        gt = self._ground_truth(objects, relationships, original_size, image_size, sized=True)
        parsed = self.parse(text)
        value = GraphF1() if gt.frame is None or not parsed.ok else self._graph_f1(parsed, gt)
        return self._f1.put(key, value)

    def _graph_f1(self, parsed: ParseResult, gt: RowTruth) -> GraphF1:
        graph, frame = parsed.graph, gt.frame
        n_pred, n_gt = len(graph.objects), gt.n
        pairs: dict[int, int] = {}  # pred index -> gt index, true positives only
        if n_pred and n_gt:
            lim = np.array([frame.width, frame.height, frame.width, frame.height])
            pred = np.minimum(
                np.maximum(np.array([o.box for o in graph.objects], dtype=np.float64), 0.0), lim
            )
            iou_m = np.nan_to_num(_geometry(pred / lim, gt.scaled, gt.area)[0])
            table: dict[str, int] = {}
            same = (
                _codes(table, [normalize_object(o.name) for o in graph.objects])[:, None]
                == _codes(table, list(gt.norm))[None, :]
            )
            hit = same & (iou_m >= self.iou_threshold)
            # Maximise the number of true positives; IoU only breaks ties between equally many.
            rows, cols = linear_sum_assignment(-(hit + 1e-3 * iou_m))
            pairs = {r: c for r, c in zip(rows.tolist(), cols.tolist(), strict=True) if hit[r, c]}
        pred_index = {o.id: i for i, o in enumerate(graph.objects)}
        pred_rels = {
            (pred_index[r.subject], normalize_predicate(r.predicate), pred_index[r.object])
            for r in graph.relations
        }
        rel_tp = sum(
            1 for s, p, o in pred_rels if s in pairs and o in pairs and (pairs[s], p, pairs[o]) in gt.f1_rels
        )
        return GraphF1(
            _f1(len(pairs), n_pred, n_gt),
            _f1(rel_tp, len(pred_rels), len(gt.f1_rels)),
            len(pairs),
            rel_tp,
            n_pred,
            len(pred_rels),
        )


def _key(value: Any) -> Any:
    """A hashable cache key for a column value: strings as they are, anything else as its ``str``."""
    return value if value is None or isinstance(value, str) else str(value)
