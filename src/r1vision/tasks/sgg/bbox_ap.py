"""COCO-style box AP of the objects in scene-graph answers (what R1-SGG prints under "IoU metric: bbox").

The definition is pycocotools' ``COCOeval`` for ``iouType="bbox"``, area range "all", ``maxDets=100``:

- per image and category, detections in score order (LLM answers carry no scores: every box scores 1,
  so the order is emission order), at most 100; each greedily takes the unmatched ground-truth box of
  highest IoU >= t (the last of equal ones), for t in 0.50:0.05:0.95; IoU without the +1-pixel term;
- per category, detections of all images in (image id, rank) order give precision/recall; precision is
  made monotone and read at 101 recall points; categories without ground truth are left out;
- ``AP`` is the mean over thresholds and categories, ``AP50``/``AP75`` at one threshold.

Each image is matched once for all categories (IoU is -1 across categories); when no box is wanted by two
detections the greedy matching is a row maximum, otherwise a short loop vectorised over the thresholds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)
MAX_DETS = 100

Box = list[float]


def _iou(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    """IoU matrix (D x G) as pycocotools' ``maskUtils.iou`` computes it on [x, y, w, h] boxes (no crowd)."""
    dw, dh, gw, gh = d[:, 2] - d[:, 0], d[:, 3] - d[:, 1], g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    iw = np.minimum((d[:, 0] + dw)[:, None], (g[:, 0] + gw)[None, :]) - np.maximum(
        d[:, None, 0], g[None, :, 0]
    )
    ih = np.minimum((d[:, 1] + dh)[:, None], (g[:, 1] + gh)[None, :]) - np.maximum(
        d[:, None, 1], g[None, :, 1]
    )
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    union = (dw * dh)[:, None] + (gw * gh)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _match(ious: np.ndarray) -> np.ndarray:
    """``matched[t, i]``: detection i (in rank order) takes a ground-truth box at threshold t.

    ``ious`` is -1 where a detection may not take a box (another category).
    """
    n_det, n_gt = ious.shape
    limits = np.minimum(THRESHOLDS, 1 - 1e-10)
    if n_gt == 0:
        return np.zeros((len(THRESHOLDS), n_det), dtype=bool)
    if (ious >= limits[0]).sum(axis=0).max() <= 1:
        # no box is wanted by two detections: each detection gets its best box whenever it qualifies
        return ious.max(axis=1)[None, :] >= limits[:, None]
    taken = np.zeros((len(THRESHOLDS), n_gt), dtype=bool)
    out = np.zeros((len(THRESHOLDS), n_det), dtype=bool)
    rows = np.arange(len(THRESHOLDS))
    for i in range(n_det):
        if ious[i].max() < limits[0]:
            continue
        cand = np.where(taken, -1.0, ious[i][None, :])
        best = n_gt - 1 - np.argmax(cand[:, ::-1], axis=1)  # the last of equal IoUs, as pycocotools
        ok = cand[rows, best] >= limits
        out[:, i] = ok
        taken[rows[ok], best[ok]] = True
    return out


def box_ap(
    images: Iterable[tuple[str, list[tuple[str, Box]], list[tuple[str, Box]]]],
) -> dict[str, float]:
    """``{"AP", "AP50", "AP75"}`` (fractions) of ``(image_id, ground truth, detections)`` triples, where
    both lists hold ``(category, [x1, y1, x2, y2])`` and detections are in rank order."""
    codes: dict[str, int] = {}
    n_gt: dict[int, int] = defaultdict(int)
    per_image = []  # (image key, category code per detection, T x D matched)
    for image_id, gts, dets in images:
        g_cat = np.array([codes.setdefault(c, len(codes)) for c, _ in gts], dtype=np.int64)
        for c in g_cat.tolist():
            n_gt[c] += 1
        d_cat = np.array([codes.setdefault(c, len(codes)) for c, _ in dets], dtype=np.int64)
        if len(d_cat) > MAX_DETS:  # at most MAX_DETS per category: rank within the category
            order = np.argsort(d_cat, kind="stable")
            rank = np.empty(len(d_cat), dtype=np.int64)
            starts = np.r_[0, np.flatnonzero(np.diff(d_cat[order])) + 1]
            rank[order] = np.arange(len(d_cat)) - np.repeat(starts, np.diff(np.r_[starts, len(d_cat)]))
            keep = rank < MAX_DETS
            dets = [d for d, k in zip(dets, keep.tolist(), strict=True) if k]
            d_cat = d_cat[keep]
        if not len(d_cat):
            continue
        d = np.asarray([b for _, b in dets], dtype=np.float64).reshape(-1, 4)
        g = np.asarray([b for _, b in gts], dtype=np.float64).reshape(-1, 4)
        ious = np.where(d_cat[:, None] == g_cat[None, :], _iou(d, g), -1.0)
        per_image.append((str(image_id), d_cat, _match(ious)))  # pycocotools sorts images by string id
    if not n_gt:
        return {"AP": 0.0, "AP50": 0.0, "AP75": 0.0}
    per_image.sort(key=lambda x: x[0])
    cats = np.concatenate([x[1] for x in per_image]) if per_image else np.zeros(0, dtype=np.int64)
    matched = np.concatenate([x[2] for x in per_image], axis=1) if per_image else np.zeros((10, 0), bool)
    order = np.argsort(cats, kind="stable")  # by category, keeping (image, rank) order inside each
    cats, matched = cats[order], matched[:, order]
    bounds = np.searchsorted(cats, np.arange(len(codes) + 1))
    eps = np.spacing(1)
    precision = np.zeros((len(THRESHOLDS), len(RECALL_POINTS), len(n_gt)))
    for k, cat in enumerate(sorted(n_gt)):
        tps = matched[:, bounds[cat] : bounds[cat + 1]]
        if not tps.shape[1]:
            continue  # ground truth but no detection: precision 0 at every recall point
        tp = np.cumsum(tps, axis=1, dtype=np.float64)
        fp = np.cumsum(~tps, axis=1, dtype=np.float64)
        recall = tp / n_gt[cat]
        prec = tp / (fp + tp + eps)
        prec = np.maximum.accumulate(prec[:, ::-1], axis=1)[:, ::-1]  # monotone from the right
        for t in range(len(THRESHOLDS)):
            idx = np.searchsorted(recall[t], RECALL_POINTS, side="left")
            valid = idx < prec.shape[1]
            precision[t, valid, k] = prec[t, idx[valid]]
    return {
        "AP": float(precision.mean()),
        "AP50": float(precision[0].mean()),
        "AP75": float(precision[5].mean()),
    }
