"""The soft scores of all rows of one reward call as a few flat array operations.

:meth:`SGGScorer.score_many` hands the rows of a call here, parsed and with their ground truth. For
the rows with objects on both sides, the matching geometry (label similarity, IoU, L1 and cost of every
predicted/GT pair) is one set of numpy calls on the pairs of all rows, each row's Hungarian matching is
one ``linear_sum_assignment`` on its slice, and the relation scores of many rows come from one join of
predicted and GT relations on (row, predicate) (:mod:`batch_relations`). Chunks and joins are bounded in
size, so memory stays bounded whatever the call holds.

Values are bit-identical to the per-row reference :meth:`SGGScorer._score`: every array value is an
elementwise function of one pair computed by the same IEEE operations, ``exp`` is Python's (numpy's
differs in the last bit for some inputs), and sums are added left to right as its loops add them
(``numpy.sum`` is pairwise; ``cumsum`` along a row is sequential).
"""

from __future__ import annotations

import math
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision import compiled
from r1vision.tasks.common import unit as _unit
from r1vision.tasks.sgg.batch_relations import relation_scores, sequential_sums
from r1vision.tasks.sgg.ground_truth import RowTruth, copy_shares, head_key, lookup
from r1vision.tasks.sgg.labels import normalize_object
from r1vision.tasks.sgg.scores import GraphScores

if TYPE_CHECKING:
    from r1vision.tasks.sgg.parse import ParseResult, SceneGraph
    from r1vision.tasks.sgg.scorer import SGGScorer

_NAME, _BOX = itemgetter(1), itemgetter(2)  # fields of parse.SGObject
_MAX_CELLS = 1 << 14  # pairs per batch: bounds the memory of a call (~2 MiB per float array)
_MAX_ROW_CELLS = 1 << 14  # bigger rows (hundreds of objects) go through the per-row path
_MAX_REL_PAIRS = 1 << 18  # (predicted x GT) relation pairs per relation join: bounds its memory


class _Item(NamedTuple):
    g: int  # GT objects
    p: int  # predicted objects
    index: int  # the row's index in the call
    graph: SceneGraph
    gt: RowTruth


class _Pairs(NamedTuple):
    """Flat per-pair arrays of a chunk (pred-major within a row) and where each row's block begins."""

    label_sim: np.ndarray
    iou: np.ndarray
    l1: np.ndarray
    cost: np.ndarray
    same: np.ndarray  # equal normalised labels
    begins: list[int]


def _chunks(rows: list[tuple[int, ParseResult, Any]]) -> list[list[_Item]]:
    """The rows with objects on both sides, in chunks of at most ``_MAX_CELLS`` pairs (a bigger row alone).

    Rows left out (unusable answer, odd columns, empty or huge graphs) are scored by the per-row path,
    which also reports their problems.
    """
    chunks: list[list[_Item]] = []
    chunk: list[_Item] = []
    cells = 0
    for i, parsed, gt in rows:
        if not parsed.ok or isinstance(gt, Exception):
            continue
        p, g = len(parsed.graph.objects), gt.n
        if not (p and g and p * g <= _MAX_ROW_CELLS):
            continue
        if chunk and cells + p * g > _MAX_CELLS:
            chunks.append(chunk)
            chunk, cells = [], 0
        chunk.append(_Item(g, p, i, parsed.graph, gt))
        cells += p * g
    if chunk:
        chunks.append(chunk)
    return chunks


def batch_geometry(scorer: SGGScorer, rows: list[tuple[int, ParseResult, Any]]) -> dict[int, tuple]:
    """``{row index: (label_sim, iou, l1, cost)}`` (P x G each) for the rows :func:`_chunks` keeps.

    ``rows`` are ``(index, parse result, ground truth or the exception its columns raised)``.
    """
    out: dict[int, tuple] = {}
    for items in _chunks(rows):
        pairs = _pair_geometry(scorer, items)
        for it, begin in zip(items, pairs.begins, strict=True):
            cut = slice(begin, begin + it.p * it.g)
            shape = (it.p, it.g)
            out[it.index] = tuple(a[cut].reshape(shape) for a in pairs[:4])
    return out


def batch_scores(scorer: SGGScorer, rows: list[tuple[int, ParseResult, Any]]) -> dict[int, GraphScores]:
    """``{row index: GraphScores}`` for the rows :func:`_chunks` keeps (default label similarities only)."""

    items: list[_Item] = []
    node: list[float] = []
    box: list[float] = []
    parts: list[_Matched] = []
    gt_base = pair_base = 0  # where each chunk's GT objects and object pairs start in the call's arrays
    for chunk in _chunks(rows):
        m = _chunk_matching(scorer, chunk)
        items += chunk
        node += m.node_sums
        box += m.box_sums
        parts.append(
            m._replace(offsets=[gt_base + o for o in m.offsets], begins=[pair_base + b for b in m.begins])
        )
        gt_base += len(m.match)
        pair_base += len(m.ok)
    if not items:
        return {}
    # the relation scores: one join for many rows (its numpy calls cost once per group, not per row)
    offsets = [o for m in parts for o in m.offsets]
    begins = [b for m in parts for b in m.begins]
    match, quality = np.concatenate([m.match for m in parts]), np.concatenate([m.quality for m in parts])
    ok = np.concatenate([m.ok for m in parts])
    copies = np.concatenate([m.copies for m in parts])
    soft_hard: dict[int, tuple[float, float]] = {}
    for group in _relation_groups(items):
        edges = relation_scores(
            scorer._labels,
            [items[k].graph for k in group],
            [items[k].gt for k in group],
            [offsets[k] for k in group],
            [begins[k] for k in group],
            match,
            quality,
            ok,
            copies,
        )
        soft_hard.update(zip(group, edges, strict=True))
    out: dict[int, GraphScores] = {}
    for k, it in enumerate(items):
        node_k, box_k = _unit(node[k] / it.g), _unit(box[k] / it.g)
        if not it.gt.n_rel:
            flag = float(not it.graph.relations)
            out[it.index] = GraphScores(node_k, box_k, flag, flag)
        elif k in soft_hard:
            soft, hard = soft_hard[k]
            out[it.index] = GraphScores(node_k, box_k, _unit(soft / it.gt.n_rel), _unit(hard / it.gt.n_rel))
        else:
            out[it.index] = GraphScores(node_k, box_k, 0.0, 0.0)
    return out


def _pair_geometry(scorer: SGGScorer, items: list[_Item]) -> _Pairs:
    # One flat entry per (predicted, GT) pair of every row, pred-major within a row: long 1-D arrays keep
    # numpy's per-call overhead and its short inner loops (x/y pairs, 20 columns) out of the hot path.
    cp = np.array([x.p for x in items], dtype=np.int64)
    cg = np.array([x.g for x in items], dtype=np.int64)
    cpg = cp * cg
    objects = list(chain.from_iterable([x.graph.objects for x in items]))
    packed = [x.graph.packed_boxes for x in items]
    if None in packed:  # a flat list of floats converts ~2x faster than a list of 4-tuples
        pred = np.array(list(chain.from_iterable(map(_BOX, objects))), dtype=np.float64)
    else:  # the compiled parser's copy of the same boxes
        pred = np.frombuffer(b"".join(packed), dtype=np.float64)
    pred = pred.reshape(-1, 4)
    lim = np.repeat(np.array([[x.gt.frame.width, x.gt.frame.height] * 2 for x in items]), cp, axis=0)
    pred = np.minimum(np.maximum(pred, 0.0), lim) / lim  # BoxFrame.clip, then normalise
    gts = np.concatenate([x.gt.scaled for x in items])
    area_b = np.concatenate([x.gt.area for x in items])
    flat = list(map(normalize_object, map(_NAME, objects)))
    labels = scorer._labels
    pcode, gcode = lookup(labels, flat), np.concatenate([x.gt.name_codes for x in items])
    credit = scorer.object_sim.head_credit
    phead = ghead = None
    if credit:
        phead = lookup(labels, list(map(head_key, flat)))
        ghead = np.concatenate([x.gt.head_codes for x in items])
    begins = (np.cumsum(cpg) - cpg).tolist()
    kernel = compiled.pair_geometry
    if kernel is not None:  # the same operations in one compiled loop (no gathers, no temporaries)
        out = kernel(
            pred,
            np.ascontiguousarray(gts),
            area_b,
            cp,
            cg,
            pcode,
            gcode,
            phead,
            ghead,
            float(scorer.w_label),
            float(scorer.w_giou),
            float(scorer.w_l1),
            float(credit or 0.0),
        )
        label_sim, iou, l1, cost = (np.frombuffer(b, dtype=np.float64) for b in out[:4])
        return _Pairs(label_sim, iou, l1, cost, np.frombuffer(out[4], dtype=np.bool_), begins)
    # pair k of predicted object j (a block of g pairs): pred j, GT offset_of_row + k - block start
    g_per_pred = np.repeat(cg, cp)
    block = np.cumsum(g_per_pred) - g_per_pred
    pi = np.repeat(np.arange(len(g_per_pred)), g_per_pred)
    gi = np.arange(int(cpg.sum())) + np.repeat(np.repeat(np.cumsum(cg) - cg, cp) - block, g_per_pred)
    # coordinates as contiguous rows (1-D takes are ~20x faster than 2-D)
    pred, gts = np.ascontiguousarray(pred.T), np.ascontiguousarray(gts.T)
    ax1, ay1, ax2, ay2 = (pred[k].take(pi) for k in range(4))
    area_a = ((pred[2] - pred[0]) * (pred[3] - pred[1])).take(pi)
    bx1, by1, bx2, by2 = (gts[k].take(gi) for k in range(4))
    area_b = area_b.take(gi)
    # the operations of scorer._geometry, in the same order (identical values)
    inter = np.maximum(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), 0.0) * np.maximum(
        np.minimum(ay2, by2) - np.maximum(ay1, by1), 0.0
    )
    union = area_a + area_b - inter
    iou = inter / np.where(union > 0, union, np.inf)
    hull = (np.maximum(ax2, bx2) - np.minimum(ax1, bx1)) * (np.maximum(ay2, by2) - np.minimum(ay1, by1))
    giou = iou - (hull - union) / np.where(hull > 0, hull, np.inf)
    # numpy sums a length-4 axis left to right, as the loop implementation did
    l1 = np.abs(ax1 - bx1) + np.abs(ay1 - by1) + np.abs(ax2 - bx2) + np.abs(ay2 - by2)
    same = pcode.take(pi) == gcode.take(gi)
    if credit:
        hp = phead.take(pi)
        head = (hp == ghead.take(gi)) & (hp >= 0)
        label_sim = np.where(same, 1.0, np.where(head, credit, 0.0))
    else:
        label_sim = same.astype(np.float64)
    # w * x with w == 1.0 is x exactly: those products are skipped, the sums stay in the reference order
    cost = _weighted(scorer.w_label, 1.0 - label_sim)
    cost += _weighted(scorer.w_giou, 1.0 - giou)
    cost += _weighted(scorer.w_l1, l1)
    if not math.isfinite(cost.sum()):  # nan_to_num leaves finite values alone: same as the per-row check
        cost = np.nan_to_num(cost, nan=1e6, posinf=1e6)
    return _Pairs(label_sim, iou, l1, cost, same, begins)


def _weighted(weight: float, values: np.ndarray) -> np.ndarray:
    return values if weight == 1.0 else weight * values


def _relation_groups(items: list[_Item]) -> list[list[int]]:
    """The rows that need relation scores, in groups of at most ``_MAX_REL_PAIRS`` (predicted x GT)
    relation pairs, which bounds the join's candidate arrays (a bigger row alone, as the per-row path)."""
    groups: list[list[int]] = []
    group: list[int] = []
    pairs = 0
    for k, it in enumerate(items):
        if not (it.gt.n_rel and it.graph.relations and len(it.gt.rel_s)):
            continue
        size = len(it.graph.relations) * len(it.gt.rel_s)
        if group and pairs + size > _MAX_REL_PAIRS:
            groups.append(group)
            group, pairs = [], 0
        group.append(k)
        pairs += size
    if group:
        groups.append(group)
    return groups


class _Matched(NamedTuple):
    """A chunk's Hungarian matching: per row the node/box sums; per GT object its matched predicted
    object (-1: none) and that pair's quality; per object pair the hard score's label-and-IoU test."""

    node_sums: list[float]
    box_sums: list[float]
    match: np.ndarray
    quality: np.ndarray
    ok: np.ndarray
    copies: np.ndarray  # per GT object, edge_hard's share among copies (ground_truth.copy_shares)
    offsets: list[int]  # where each row's GT objects start in ``match``/``quality``
    begins: list[int]  # where each row's object pairs start in ``ok``


def _chunk_matching(scorer: SGGScorer, items: list[_Item]) -> _Matched:
    pairs = _pair_geometry(scorer, items)
    # Hungarian matching per row; the matched pairs of all rows are then gathered in one go, in the
    # order linear_sum_assignment returns them (the order the reference loop adds them in)
    pred_of, gt_of, offsets = [], [], []
    goff = 0
    cost = pairs.cost
    for it, begin in zip(items, pairs.begins, strict=True):
        r, c = linear_sum_assignment(cost[begin : begin + it.p * it.g].reshape(it.p, it.g))
        pred_of.append(r)
        gt_of.append(c)
        offsets.append(goff)
        goff += it.g
    lengths = [len(r) for r in pred_of]
    r, c = np.concatenate(pred_of), np.concatenate(gt_of)
    g = np.repeat(np.array([it.g for it in items]), lengths)
    matched = r * g + c + np.repeat(np.array(pairs.begins), lengths)  # flat pair index of each match
    slots = c + np.repeat(np.array(offsets), lengths)  # chunk-wide GT index of each match
    sim = pairs.label_sim.take(matched)
    exp = math.exp
    decay = np.array([exp(-d) for d in pairs.l1.take(matched).tolist()])
    a, b = scorer.box_iou_weight, scorer.box_l1_weight
    iou = pairs.iou.take(matched)
    term = 0.5 * (iou + decay) if a == b else (a * iou + b * decay) / (a + b)
    match = np.full(goff, -1, dtype=np.int64)
    match[slots] = r
    quality = np.zeros(goff)
    quality[slots] = sim * term
    ok = (pairs.iou >= scorer.iou_threshold) & pairs.same
    return _Matched(
        sequential_sums(sim, lengths).tolist(),
        sequential_sums(term, lengths).tolist(),
        match,
        quality,
        ok,
        _copy_shares(ok, items, pairs.begins, offsets, goff),
        offsets,
        pairs.begins,
    )


def _copy_shares(
    ok: np.ndarray, items: list[_Item], begins: list[int], offsets: list[int], n_gt: int
) -> np.ndarray:
    """:func:`copy_shares` of every row of a chunk, indexed like ``match``: the passing predicted objects per
    GT object are counted for the whole chunk at once; only rows where some GT object has several are
    looked at one by one."""
    out = np.ones(n_gt)
    hits = np.flatnonzero(ok)  # few: about one passing pair per GT object, so the rest works on these only
    if not len(hits):
        return out
    starts = np.array(begins, dtype=np.int64)
    g = np.array([it.g for it in items], dtype=np.int64)
    row = np.searchsorted(starts, hits, "right") - 1  # blocks are contiguous, in row order
    slot = (hits - starts[row]) % g[row] + np.array(offsets, dtype=np.int64)[row]
    k = np.bincount(slot, minlength=n_gt)
    if k.max() <= 1:
        return out
    row_of = np.repeat(np.arange(len(items)), g)
    for r in np.unique(row_of[k > 1]).tolist():
        it, begin, off = items[r], begins[r], offsets[r]
        out[off : off + it.g] = copy_shares(ok[begin : begin + it.p * it.g].reshape(it.p, it.g))
    return out
