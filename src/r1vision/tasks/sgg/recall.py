"""Which ground-truth relations the top-K candidates recall, for all images of an evaluation at once.

:mod:`evaluate` hands over every evaluated image's GT relations and candidates as flat arrays: a label
triplet code per relation/candidate (equal codes = subject, predicate and object labels agree), box pairs,
and each candidate's rank in a ranking (-1: not in it). The result is, per GT relation, the smallest K
whose top-K candidates recall it, so ``first < K`` is the recall mask for any K.

A candidate hits a GT relation of its image with the same label triplet when both boxes overlap with
IoU >= 0.5. In R1-SGG's mode any hit recalls (``first`` = the best-ranked hit). Otherwise each candidate
recalls at most one GT relation (a maximum bipartite matching of the top K): where no candidate hits two
GT relations that is the best-ranked hit as well; the images where one does are matched with augmenting
paths, candidate by candidate in rank order, so one pass gives the matching of every top K. Which maximum
matching is chosen does not change any metric: hits need equal label triplets, so each connected part of
the hit graph holds one triplet, and a maximum matching's size on each part is fixed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

NOT_RECALLED = np.iinfo(np.int64).max


def pair_iou(a: np.ndarray, b: np.ndarray, plus_one: bool) -> np.ndarray:
    """IoU of box pairs ``a[i]``, ``b[i]`` (both n x 4); same rule as :func:`boxes.iou`.

    ``plus_one`` (R1-SGG compat) also computes in float32, as R1-SGG's evaluator does on its tensors: a
    box whose IoU is 0.5 in one precision can fall below it in the other.
    """
    if plus_one:
        a, b = a.astype(np.float32), b.astype(np.float32)
    e = 1.0 if plus_one else 0.0
    iw = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]) + e, 0, None)
    ih = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]) + e, 0, None)
    inter = iw * ih
    area_a = np.clip(a[:, 2] - a[:, 0] + e, 0, None) * np.clip(a[:, 3] - a[:, 1] + e, 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0] + e, 0, None) * np.clip(b[:, 3] - b[:, 1] + e, 0, None)
    union = area_a + area_b - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def hit_pairs(
    gt_key: np.ndarray, gt_boxes: np.ndarray, cand_key: np.ndarray, cand_boxes: np.ndarray, plus_one: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(candidate index, GT index) of every hit. Keys are (image, label triplet) codes; boxes are n x 8
    (subject box, object box)."""
    order = np.argsort(gt_key, kind="stable")
    sorted_key = gt_key[order]
    lo = np.searchsorted(sorted_key, cand_key, "left")
    count = np.searchsorted(sorted_key, cand_key, "right") - lo
    ci = np.repeat(np.arange(len(cand_key)), count)
    offset = np.arange(len(ci)) - np.repeat(np.cumsum(count) - count, count)
    gi = order[np.repeat(lo, count) + offset]
    c, g = cand_boxes[ci], gt_boxes[gi]
    ok = (pair_iou(c[:, :4], g[:, :4], plus_one) >= 0.5) & (pair_iou(c[:, 4:], g[:, 4:], plus_one) >= 0.5)
    return ci[ok], gi[ok]


def _augment(row: int, adj: dict[int, list[int]], owner: dict[int, int]) -> int | None:
    """Augment the matching ``owner`` (GT -> row) along a path from ``row``; the newly matched GT or None."""
    seen: set[int] = set()
    stack = [(row, iter(adj[row]))]
    via: list[int] = []  # the GT taken at each level of the path
    while stack:
        r, options = stack[-1]
        for g in options:
            if g in seen:
                continue
            seen.add(g)
            if g not in owner:  # a free GT: flip the path
                path_rows = [s[0] for s in stack]
                for level, gt in enumerate([*via, g]):
                    owner[gt] = path_rows[level]
                return g
            via.append(g)
            stack.append((owner[g], iter(adj[owner[g]])))
            break
        else:
            stack.pop()
            if via:
                via.pop()
    return None


def _matched_first(rank: np.ndarray, gt: np.ndarray) -> dict[int, int]:
    """GT -> the rank after which a maximum matching of the top candidates includes it (one image)."""
    adj: dict[int, list[int]] = defaultdict(list)
    for r, g in zip(rank.tolist(), gt.tolist(), strict=True):
        adj[r].append(g)
    owner: dict[int, int] = {}
    first: dict[int, int] = {}
    for r in sorted(adj):
        g = next((g for g in adj[r] if g not in owner), None)  # a free GT: the shortest augmenting path
        if g is None:
            g = _augment(r, adj, owner)
        else:
            owner[g] = r
        if g is not None:  # a matched GT stays matched: it is recalled from rank r on
            first[g] = r
    return first


def first_recalled(
    n_gt: int, cand: np.ndarray, gt: np.ndarray, rank: np.ndarray, gt_group: np.ndarray, exclusive: bool
) -> np.ndarray:
    """Per GT relation, the 0-based rank of the candidate from which on it is recalled (NOT_RECALLED if
    never). ``cand``/``gt``: the hit pairs; ``rank``: per candidate, its rank in this ranking or -1;
    ``gt_group``: per GT relation, its (image, label triplet) key (every hit stays inside one group)."""
    keep = rank[cand] >= 0
    cand, gt = cand[keep], gt[keep]
    r = rank[cand]
    first = np.full(n_gt, NOT_RECALLED, dtype=np.int64)
    np.minimum.at(first, gt, r)
    if exclusive and len(cand):
        multi = np.bincount(cand, minlength=len(rank))[cand] > 1
        if multi.any():  # groups where a candidate hits two GT relations need a matching
            groups = np.unique(gt_group[gt[multi]])
            sel = np.flatnonzero(np.isin(gt_group[gt], groups))
            sel = sel[np.argsort(gt_group[gt[sel]], kind="stable")]
            first[gt[sel]] = NOT_RECALLED
            bounds = np.flatnonzero(np.diff(gt_group[gt[sel]])) + 1
            for part in np.split(sel, bounds):
                for g, k in _matched_first(r[part], gt[part]).items():
                    first[g] = k
    return first


def recall_tables(
    first: np.ndarray,
    gt_image: np.ndarray,
    n_images: int,
    gt_pred: np.ndarray,
    gt_zero_shot: np.ndarray,
    ks: Sequence[int],
) -> dict[int, tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]]:
    """Per K: (recall per image, zero-shot recall per image that has zero-shot GT, {predicate code: its
    recall per image where it occurs, in image order}). Same arithmetic as a per-image loop: counts are
    exact, each value one division."""
    n_gt = np.bincount(gt_image, minlength=n_images)
    n_zs = np.bincount(gt_image, weights=gt_zero_shot, minlength=n_images)
    has_zs = n_zs > 0
    n_pred = int(gt_pred.max(initial=0)) + 1
    groups, group_of = np.unique(gt_image.astype(np.int64) * n_pred + gt_pred, return_inverse=True)
    group_count = np.bincount(group_of, minlength=len(groups))
    group_pred = groups % n_pred
    by_pred = np.argsort(group_pred, kind="stable")  # image order kept inside each predicate
    preds, starts = np.unique(group_pred[by_pred], return_index=True)
    ends = np.r_[starts[1:], len(by_pred)]
    out = {}
    for k in ks:
        mask = first < k
        rec = np.bincount(gt_image, weights=mask, minlength=n_images) / n_gt
        zrec = np.bincount(gt_image, weights=mask & gt_zero_shot, minlength=n_images)[has_zs] / n_zs[has_zs]
        per = (np.bincount(group_of, weights=mask, minlength=len(groups)) / group_count)[by_pred]
        table = {int(p): per[a:b].copy() for p, a, b in zip(preds.tolist(), starts, ends, strict=True)}
        out[k] = (rec, zrec, table)
    return out
