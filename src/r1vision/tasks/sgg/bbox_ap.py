"""COCO-style box AP of the objects in scene-graph answers (what R1-SGG prints under "IoU metric: bbox").

The definition is pycocotools' ``COCOeval`` for ``iouType="bbox"``, area range "all", ``maxDets=100``:

- per image and category, detections in score order (LLM answers carry no scores: every box scores 1,
  so the order is emission order), at most 100; each greedily takes the unmatched ground-truth box of
  highest IoU >= t (the last of equal ones), for t in 0.50:0.05:0.95; IoU without the +1-pixel term;
- per category, detections of all images in (image id, rank) order give precision/recall; precision is
  made monotone and read at 101 recall points; categories without ground truth are left out;
- ``AP`` is the mean over thresholds and categories, ``AP50``/``AP75`` at one threshold.

Most (image, category) groups hold one detection or one ground-truth box; those are matched with array
operations, the rest with a short loop vectorised over the ten thresholds.
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
    """``matched[t, i]``: detection i (in rank order) takes a ground-truth box at threshold t."""
    n_det, n_gt = ious.shape
    limits = np.minimum(THRESHOLDS, 1 - 1e-10)[:, None]
    if n_gt == 1:  # the first detection above the threshold takes the only box
        above = ious[:, 0][None, :] >= limits
        first = np.argmax(above, axis=1)
        out = np.zeros((len(THRESHOLDS), n_det), dtype=bool)
        rows = np.flatnonzero(above.any(axis=1))
        out[rows, first[rows]] = True
        return out
    if n_det == 1:
        return (ious.max(axis=1)[None, :] >= limits).reshape(len(THRESHOLDS), 1)
    taken = np.zeros((len(THRESHOLDS), n_gt), dtype=bool)
    out = np.zeros((len(THRESHOLDS), n_det), dtype=bool)
    for i in range(n_det):
        cand = np.where(taken, -1.0, ious[i][None, :])
        best = n_gt - 1 - np.argmax(cand[:, ::-1], axis=1)  # the last of equal IoUs, as pycocotools
        ok = cand[np.arange(len(THRESHOLDS)), best] >= limits[:, 0]
        out[:, i] = ok
        taken[np.flatnonzero(ok), best[ok]] = True
    return out


def box_ap(
    images: Iterable[tuple[str, list[tuple[str, Box]], list[tuple[str, Box]]]],
) -> dict[str, float]:
    """``{"AP", "AP50", "AP75"}`` (fractions) of ``(image_id, ground truth, detections)`` triples, where
    both lists hold ``(category, [x1, y1, x2, y2])`` and detections are in rank order."""
    n_gt: dict[str, int] = defaultdict(int)
    det_hits: dict[str, list[tuple[str, np.ndarray]]] = defaultdict(list)  # cat -> [(image key, T x D)]
    for image_id, gts, dets in images:
        by_cat_gt: dict[str, list[Box]] = defaultdict(list)
        for cat, box in gts:
            by_cat_gt[cat].append(box)
        for cat, boxes in by_cat_gt.items():
            n_gt[cat] += len(boxes)
        by_cat_det: dict[str, list[Box]] = defaultdict(list)
        for cat, box in dets:
            if len(by_cat_det[cat]) < MAX_DETS:
                by_cat_det[cat].append(box)
        key = str(image_id)  # pycocotools orders images by np.unique of the (string) ids
        for cat, boxes in by_cat_det.items():
            if cat not in by_cat_gt:  # false positives (they count if the category has GT elsewhere)
                det_hits[cat].append((key, np.zeros((len(THRESHOLDS), len(boxes)), dtype=bool)))
                continue
            d = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
            g = np.asarray(by_cat_gt[cat], dtype=np.float64).reshape(-1, 4)
            det_hits[cat].append((key, _match(_iou(d, g))))
    if not n_gt:
        return {"AP": 0.0, "AP50": 0.0, "AP75": 0.0}
    eps = np.spacing(1)
    precision = np.zeros((len(THRESHOLDS), len(RECALL_POINTS), len(n_gt)))
    for k, cat in enumerate(sorted(n_gt)):
        parts = [m for _, m in sorted(det_hits.get(cat, []), key=lambda x: x[0])]
        if not parts:
            continue  # ground truth but no detection: precision 0 at every recall point
        tps = np.concatenate(parts, axis=1)
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
