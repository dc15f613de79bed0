"""COCO-style box AP of the objects in scene-graph answers (what R1-SGG prints under "IoU metric: bbox").

The definition is pycocotools' ``COCOeval`` for ``iouType="bbox"``, area range "all", ``maxDets=100``:

- per image and category, detections in score order (LLM answers carry no scores: every box scores 1,
  so the order is emission order), at most 100; each greedily takes the unmatched ground-truth box of
  highest IoU >= t (the last of equal ones), for t in 0.50:0.05:0.95; IoU without the +1-pixel term;
- per category, detections of all images in (image id, rank) order give precision/recall; precision is
  made monotone and read at 101 recall points; categories without ground truth are left out;
- ``AP`` is the mean over thresholds and categories, ``AP50``/``AP75`` at one threshold.

Detections are compared with the GT boxes of their image and category only, for all images at once; where
no box is wanted by two detections the greedy matching is each detection's best IoU, otherwise (those
images only) a short loop vectorised over the thresholds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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


def _match(ious: np.ndarray, uncredited: int | None = None) -> np.ndarray:
    """``matched[t, i]``: detection i (in rank order) takes a ground-truth box at threshold t.

    ``ious`` is -1 where a detection may not take a box (another category). A detection that takes the
    box ``uncredited`` is not counted as matched (the box is taken all the same): pycocotools' reading of a
    ground-truth annotation numbered 0, whose id marks "unmatched" in its tables.
    """
    n_det, n_gt = ious.shape
    limits = np.minimum(THRESHOLDS, 1 - 1e-10)
    if n_gt == 0:
        return np.zeros((len(THRESHOLDS), n_det), dtype=bool)
    if uncredited is None and (ious >= limits[0]).sum(axis=0).max() <= 1:
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
        out[:, i] = ok & (best != uncredited)
        taken[rows[ok], best[ok]] = True
    return out


def _pair_iou(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    """:func:`_iou` of box pairs ``d[i]``, ``g[i]`` (same arithmetic, so the same values)."""
    dw, dh, gw, gh = d[:, 2] - d[:, 0], d[:, 3] - d[:, 1], g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    iw = np.minimum(d[:, 0] + dw, g[:, 0] + gw) - np.maximum(d[:, 0], g[:, 0])
    ih = np.minimum(d[:, 1] + dh, g[:, 1] + gh) - np.maximum(d[:, 1], g[:, 1])
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    union = dw * dh + gw * gh - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


class BoxAP:
    """Box AP of many images: images are added one by one and matched a chunk at a time (matching never
    looks past an image), keeping per detection only its category, image and matched flags, so memory stays
    flat in the number of images; :meth:`result` scores."""

    CHUNK = 4096  # images matched together: large enough to vectorise, small enough to stay flat

    def __init__(self, first_box_numbered_zero: bool = False) -> None:
        # R1-SGG numbers its COCO ground-truth annotations from 0, and pycocotools takes an annotation id of
        # 0 for "unmatched": the detection that matches the dataset's first box counts as a false positive.
        # Compat mode reproduces that (the first box of the first image added); the default counts it right.
        self.first_box_numbered_zero = first_box_numbered_zero
        self.codes: dict[str, int] = {}
        self.image_ids: list[str] = []
        self.zero_image: int | None = None  # the image holding the box numbered 0 (compat mode)
        self._reset_chunk()
        self.n_gt = np.zeros(0, dtype=np.int64)  # GT boxes per category code
        self.det_cat: list[np.ndarray] = []  # matched chunks: kept detections' category, image, flags
        self.det_img: list[np.ndarray] = []
        self.matched: list[np.ndarray] = []

    def _reset_chunk(self) -> None:
        self.first = len(self.image_ids)  # the first image of the chunk
        self.g_cat: list[int] = []
        self.g_img: list[int] = []  # image numbers inside the chunk
        self.g_boxes: list[np.ndarray] = []
        self.d_cat: list[int] = []
        self.d_img: list[int] = []
        self.d_boxes: list[np.ndarray] = []

    def add(
        self,
        image_id: str,
        gt_cats: list[str],
        gt_boxes: Any,
        det_cats: list[str],
        det_boxes: Any,
        first_of_dataset: bool = False,
    ) -> None:
        """One image: GT and detection categories and ``[x1, y1, x2, y2]`` boxes, detections in rank order;
        ``first_of_dataset``: its first GT box is the dataset's first (numbered 0 by R1-SGG)."""
        code, image = self.codes.setdefault, len(self.image_ids)
        if first_of_dataset and len(gt_cats):
            self.zero_image = image
        self.image_ids.append(str(image_id))
        local = image - self.first
        self.g_cat.extend([code(c, len(self.codes)) for c in gt_cats])
        self.g_img.extend([local] * len(gt_cats))
        self.g_boxes.append(np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4))
        self.d_cat.extend([code(c, len(self.codes)) for c in det_cats])
        self.d_img.extend([local] * len(det_cats))
        self.d_boxes.append(np.asarray(det_boxes, dtype=np.float64).reshape(-1, 4))
        if local + 1 >= self.CHUNK:
            self._match_chunk()

    def _match_chunk(self) -> None:
        """Match the chunk's detections (pycocotools' greedy rule, per image and category) and keep flags."""
        n_cat = len(self.codes)
        g_cat, g_img = np.array(self.g_cat, dtype=np.int64), np.array(self.g_img, dtype=np.int64)
        counts = np.bincount(g_cat, minlength=n_cat)
        self.n_gt = np.r_[self.n_gt, np.zeros(n_cat - len(self.n_gt), dtype=np.int64)] + counts
        d_cat, d_img = np.array(self.d_cat, dtype=np.int64), np.array(self.d_img, dtype=np.int64)
        if len(d_cat):
            g_box = np.concatenate(self.g_boxes) if self.g_boxes else np.zeros((0, 4))
            d_box = np.concatenate(self.d_boxes)
            # at most MAX_DETS per image and category: the first ones in rank order
            key = d_img * n_cat + d_cat
            order = np.argsort(key, kind="stable")
            starts = np.r_[0, np.flatnonzero(np.diff(key[order])) + 1]
            rank = np.empty(len(key), dtype=np.int64)
            rank[order] = np.arange(len(key)) - np.repeat(starts, np.diff(np.r_[starts, len(key)]))
            keep = rank < MAX_DETS
            d_cat, d_img, d_box, key = d_cat[keep], d_img[keep], d_box[keep], key[keep]
            # each detection against the GT boxes of its image and category
            g_order = np.argsort(g_img * n_cat + g_cat, kind="stable")
            g_key = (g_img * n_cat + g_cat)[g_order]
            lo = np.searchsorted(g_key, key, "left")
            count = np.searchsorted(g_key, key, "right") - lo
            pd = np.repeat(np.arange(len(key)), count)
            pg = g_order[
                np.repeat(lo, count) + np.arange(len(pd)) - np.repeat(np.cumsum(count) - count, count)
            ]
            ious = _pair_iou(d_box[pd], g_box[pg])
            limits = np.minimum(THRESHOLDS, 1 - 1e-10)
            best = np.full(len(key), -1.0)
            np.maximum.at(best, pd, ious)
            # no box wanted by two detections: each detection gets its best box whenever it qualifies
            matched = best[None, :] >= limits[:, None]
            wanted = np.bincount(pg[ious >= limits[0]], minlength=len(g_cat))
            slow = set(np.unique(g_img[wanted > 1]).tolist())
            zero_here = self.zero_image is not None and self.zero_image >= self.first
            zero_local = self.zero_image - self.first if zero_here else None  # type: ignore[operator]
            if self.first_box_numbered_zero and zero_local is not None:
                slow.add(zero_local)
            for image in sorted(slow):  # the others: greedy matching in rank order
                dets, gts = np.flatnonzero(d_img == image), np.flatnonzero(g_img == image)
                same = d_cat[dets][:, None] == g_cat[gts][None, :]
                uncredited = 0 if self.first_box_numbered_zero and image == zero_local else None
                matched[:, dets] = _match(np.where(same, _iou(d_box[dets], g_box[gts]), -1.0), uncredited)
            self.det_cat.append(d_cat.astype(np.int32))
            self.det_img.append((d_img + self.first).astype(np.int32))
            self.matched.append(matched)
        self._reset_chunk()

    def result(self) -> dict[str, float]:
        """``{"AP", "AP50", "AP75"}`` (fractions)."""
        self._match_chunk()
        if not self.n_gt.sum():
            return {"AP": 0.0, "AP50": 0.0, "AP75": 0.0}
        d_cat = np.concatenate(self.det_cat).astype(np.int64) if self.det_cat else np.zeros(0, np.int64)
        d_img = np.concatenate(self.det_img).astype(np.int64) if self.det_img else np.zeros(0, np.int64)
        matched = (
            np.concatenate(self.matched, axis=1) if self.matched else np.zeros((len(THRESHOLDS), 0), bool)
        )
        n_gt = np.r_[self.n_gt, np.zeros(len(self.codes) - len(self.n_gt), dtype=np.int64)]
        position = np.empty(len(self.image_ids), dtype=np.int64)  # pycocotools sorts images by string id
        position[sorted(range(len(self.image_ids)), key=self.image_ids.__getitem__)] = np.arange(
            len(position)
        )
        order = np.lexsort((np.arange(len(d_cat)), position[d_img], d_cat))  # category, image, rank
        return _average_precision(d_cat[order], matched[:, order], n_gt)


def _average_precision(cats: np.ndarray, matched: np.ndarray, n_gt: np.ndarray) -> dict[str, float]:
    """COCO precision at 101 recall points per threshold and category with ground truth, averaged."""
    with_gt = np.flatnonzero(n_gt)
    bounds = np.searchsorted(cats, np.arange(len(n_gt) + 1))
    eps = np.spacing(1)
    precision = np.zeros((len(THRESHOLDS), len(RECALL_POINTS), len(with_gt)))
    for k, cat in enumerate(with_gt.tolist()):
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


def box_ap(
    images: Iterable[tuple[str, list[tuple[str, Box]], list[tuple[str, Box]]]],
) -> dict[str, float]:
    """``{"AP", "AP50", "AP75"}`` (fractions) of ``(image_id, ground truth, detections)`` triples, where
    both lists hold ``(category, [x1, y1, x2, y2])`` and detections are in rank order."""
    acc = BoxAP()
    for image_id, gts, dets in images:
        acc.add(
            image_id, [c for c, _ in gts], [b for _, b in gts], [c for c, _ in dets], [b for _, b in dets]
        )
    return acc.result()
