"""The matching geometry of all rows of one reward call as a few padded array operations.

:meth:`SGGScorer.score_many` hands the rows of a call here; each row's label similarity, IoU, L1 and
matching cost come out of one set of numpy calls on a (rows x P x G) batch instead of ~30 calls per
row. Every value is an elementwise function of one (predicted, GT) pair computed by the same operations
as :meth:`SGGScorer._geometry_of`, so the slices are bit-identical to the per-row matrices; the padding
is cut away before matching.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from r1vision.tasks.sgg.labels import normalize_object
from r1vision.tasks.sgg.scorer import _head_key, _lookup

if TYPE_CHECKING:
    from r1vision.tasks.sgg.scorer import SGGScorer

_MAX_CELLS = 1 << 14  # pairs per batch: bounds the memory of a call (~2 MiB per float array)
_MAX_ROW_CELLS = 1 << 14  # bigger rows (hundreds of objects) go through the per-row path


def batch_geometry(scorer: SGGScorer, rows: list[tuple[int, tuple]]) -> dict[int, tuple]:
    """``{row index: (label_sim, iou, l1, cost)}`` for the rows that have objects on both sides.

    ``rows`` are ``(index, (text, objects, relationships, original_size, image_size))``. Rows that cannot
    be batched (unusable answer, odd columns, empty or huge graphs) are left out: the per-row path
    scores them and reports their problems.
    """
    items = []
    for i, (text, objects, relationships, orig, resized) in rows:
        try:
            parsed = scorer.parse(text)
            if not parsed.ok or not parsed.graph.objects:
                continue
            gt = scorer._ground_truth(objects, relationships, orig, resized, sized=False)
        except Exception:  # the per-row path raises again and warns
            continue
        p, g = len(parsed.graph.objects), gt.n
        if g and p * g <= _MAX_ROW_CELLS:
            items.append((g, p, i, parsed.graph, gt))
    out: dict[int, tuple] = {}
    chunk: list[tuple] = []
    cells = 0
    for item in items:
        if chunk and cells + item[0] * item[1] > _MAX_CELLS:
            out.update(_chunk(scorer, chunk))
            chunk, cells = [], 0
        chunk.append(item)
        cells += item[0] * item[1]
    if chunk:
        out.update(_chunk(scorer, chunk))
    return out


def _chunk(scorer: SGGScorer, items: list[tuple]) -> dict[int, tuple]:
    # One flat entry per (predicted, GT) pair of every row, pred-major within a row: long 1-D arrays keep
    # numpy's per-call overhead and its short inner loops (x/y pairs, 20 columns) out of the hot path.
    cp = np.array([x[1] for x in items])
    cg = np.array([x[0] for x in items])
    cpg = cp * cg
    # pair k of predicted object j (a block of g pairs): pred j, GT offset_of_row + k - block start
    g_per_pred = np.repeat(cg, cp)
    block = np.cumsum(g_per_pred) - g_per_pred
    pi = np.repeat(np.arange(len(g_per_pred)), g_per_pred)
    gi = np.arange(int(cpg.sum())) + np.repeat(np.repeat(np.cumsum(cg) - cg, cp) - block, g_per_pred)
    # a flat list of floats converts ~2x faster than a list of 4-tuples
    pred = np.array(list(chain.from_iterable([o.box for x in items for o in x[3].objects])), dtype=np.float64)
    pred = pred.reshape(-1, 4)
    lim = np.repeat(np.array([[x[4].frame.width, x[4].frame.height] * 2 for x in items]), cp, axis=0)
    # BoxFrame.clip, then normalise; coordinates as contiguous rows (1-D takes are ~20x faster than 2-D)
    pred = np.ascontiguousarray((np.minimum(np.maximum(pred, 0.0), lim) / lim).T)
    ax1, ay1, ax2, ay2 = (pred[k].take(pi) for k in range(4))
    area_a = ((pred[2] - pred[0]) * (pred[3] - pred[1])).take(pi)
    gts = np.ascontiguousarray(np.concatenate([x[4].scaled for x in items]).T)
    bx1, by1, bx2, by2 = (gts[k].take(gi) for k in range(4))
    area_b = np.concatenate([x[4].area for x in items]).take(gi)
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

    flat = [normalize_object(o.name) for x in items for o in x[3].objects]
    labels = scorer._labels
    pc = _lookup(labels, flat)
    same = pc.take(pi) == np.concatenate([x[4].name_codes for x in items]).take(gi)
    credit = scorer.object_sim.head_credit
    if credit:
        hp = _lookup(labels, [_head_key(s) for s in flat]).take(pi)
        head = (hp == np.concatenate([x[4].head_codes for x in items]).take(gi)) & (hp >= 0)
        label_sim = np.where(same, 1.0, np.where(head, credit, 0.0))
    else:
        label_sim = same.astype(np.float64)
    cost = scorer.w_label * (1.0 - label_sim) + scorer.w_giou * (1.0 - giou) + scorer.w_l1 * l1
    if not np.isfinite(cost).all():  # nan_to_num leaves finite values alone: same as the per-row check
        cost = np.nan_to_num(cost, nan=1e6, posinf=1e6)
    out: dict[int, Any] = {}
    ends = np.cumsum(cpg).tolist()
    begin = 0
    for (g, p, i, _graph, _gt), end in zip(items, ends, strict=True):
        shape = (p, g)
        out[i] = (
            label_sim[begin:end].reshape(shape),
            iou[begin:end].reshape(shape),
            l1[begin:end].reshape(shape),
            cost[begin:end].reshape(shape),
        )
        begin = end
    return out
