"""The edge scores of many matched rows at once: one join of predicted and GT relations on (row, predicate).

Per GT relation (of the ids that exist), the reference (:meth:`SGGScorer._score`) asks whether some
predicted relation has the same normalised predicate and (soft) joins the predicted objects matched to
the GT relation's ends, or (hard) joins objects that each have the GT end's label with IoU >= the
threshold. Here the predicted relations of all rows are sorted by (row, predicate code), each GT relation
finds its candidates with two binary searches, and both conditions are checked on the candidate pairs
only; a row costs a few Python lists, the rest is array operations shared by the whole chunk.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from r1vision import compiled
from r1vision.tasks.sgg.ground_truth import RowTruth, lookup, pair_label_counts, predicate_key

if TYPE_CHECKING:
    from r1vision.tasks.sgg.parse import SceneGraph

_ID = itemgetter(0)  # of parse.SGObject
_SUBJECT, _PREDICATE, _OBJECT = itemgetter(0), itemgetter(1), itemgetter(2)  # of parse.SGRelation


def sequential_sums(values: np.ndarray, lengths: list[int]) -> np.ndarray:
    """Sums of consecutive segments of ``values``, each added left to right from 0.0 as a loop adds.

    ``numpy.sum`` and ``add.reduceat`` sum pairwise (different last bits); ``cumsum`` along the rows of
    a zero-padded matrix adds in order, and the padding adds exact zeros.
    """
    n = len(lengths)
    width = max(lengths, default=0)
    if not width:
        return np.zeros(n)
    counts = np.asarray(lengths)
    padded = np.zeros((n, width))
    rows = np.repeat(np.arange(n), counts)
    cols = np.arange(len(values)) - np.repeat(np.cumsum(counts) - counts, counts)
    padded[rows, cols] = values
    return np.cumsum(padded, axis=1)[:, -1]


def relation_scores(
    labels: dict[str, int],
    graphs: list[SceneGraph],
    gts: list[RowTruth],
    gt_offsets: list[int],
    pair_begins: list[int],
    match: np.ndarray,
    quality: np.ndarray,
    ok: np.ndarray,
    copies: np.ndarray,
) -> list[tuple[float, float]]:
    """(soft sum, hard count) of each row; rows need relations on both sides and known GT relations.

    ``match``/``quality`` map each GT object of the chunk (row ``k``'s start at ``gt_offsets[k]``) to
    its matched predicted object (-1: none) and that match's quality; ``ok`` is the hard condition of
    every (predicted, GT) object pair, pred-major, row ``k``'s block starting at ``pair_begins[k]``;
    ``copies`` (indexed like ``quality``) each GT object's hard-credit share among predicted copies.
    """
    if not graphs:
        return []
    ps: list[int] = []
    po: list[int] = []
    keys: list[str] = []
    n_pred = []
    links = [graph.packed_links for graph in graphs]
    packed = None not in links  # the compiled parser already resolved the ids to object indices
    for graph in graphs:
        keys += map(predicate_key, map(_PREDICATE, graph.relations))
        n_pred.append(len(graph.relations))
        if not packed:
            index = dict(zip(map(_ID, graph.objects), range(len(graph.objects)), strict=True))
            ps += map(index.__getitem__, map(_SUBJECT, graph.relations))  # the parser keeps only
            po += map(index.__getitem__, map(_OBJECT, graph.relations))  # relations between known ids
    n_rows = len(graphs)
    pcode = lookup(labels, keys)
    if packed:
        pairs = np.frombuffer(b"".join(links), dtype=np.int64)
        ps_a, po_a = pairs[0::2], pairs[1::2]
    else:
        ps_a, po_a = np.array(ps, dtype=np.int64), np.array(po, dtype=np.int64)

    n_gt = [len(gt.rel_s) for gt in gts]
    rs = np.concatenate([gt.rel_s for gt in gts])
    ro = np.concatenate([gt.rel_o for gt in gts])
    gcode = np.concatenate([gt.pred_codes for gt in gts])
    prow, grow = np.repeat(np.arange(n_rows), n_pred), np.repeat(np.arange(n_rows), n_gt)
    # the several-predicates-per-pair rule (see SGGScorer._score): k per predicted, g per GT relation
    key_ids: dict[str, int] = {}
    kp = pair_label_counts(prow, ps_a, po_a, np.array([key_ids.setdefault(k, len(key_ids)) for k in keys]))
    gm = pair_label_counts(grow, rs, ro, gcode)
    kernel = compiled.relation_hits
    if kernel is not None:  # the same join and sums, row by row in one compiled loop
        as64 = np.ascontiguousarray
        return kernel(
            np.array(n_pred, dtype=np.int64),
            as64(ps_a),
            as64(po_a),
            pcode,
            np.array(n_gt, dtype=np.int64),
            as64(rs, dtype=np.int64),
            as64(ro, dtype=np.int64),
            as64(gcode, dtype=np.int64),
            np.array([gt.n for gt in gts], dtype=np.int64),
            np.array(gt_offsets, dtype=np.int64),
            np.array(pair_begins, dtype=np.int64),
            as64(match, dtype=np.int64),
            as64(quality, dtype=np.float64),
            as64(ok, dtype=np.bool_),
            as64(kp, dtype=np.float64),
            as64(gm, dtype=np.float64),
            as64(copies, dtype=np.float64),
        )
    offset = np.repeat(np.array(gt_offsets, dtype=np.int64), n_gt)
    qs, qo = quality[rs + offset], quality[ro + offset]

    # the join: candidates of GT relation j are the predicted relations of its row with its predicate
    width = len(labels) + 1  # codes lie in [-2, len(labels)); GT predicate codes are >= 0
    known = np.flatnonzero(pcode >= 0)  # -1: a predicate no GT row has
    order = known[np.argsort(prow[known] * width + pcode[known], kind="stable")]
    sorted_keys = prow[order] * width + pcode[order]
    gkey = grow * width + gcode
    lo = np.searchsorted(sorted_keys, gkey, "left")
    count = np.searchsorted(sorted_keys, gkey, "right") - lo
    jj = np.repeat(np.arange(len(gkey)), count)
    ii = order[np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))]
    pi, qi = ps_a[ii], po_a[ii]

    share = np.minimum(1.0, gm[jj] / kp[ii])  # each candidate's worth under the several-predicates rule
    # soft: a candidate joins the objects matched to both ends (an unmatched end, -1, equals no index)
    soft_hit = (pi == match[rs + offset][jj]) & (qi == match[ro + offset][jj])
    best = np.zeros(len(gkey))
    np.maximum.at(best, jj[soft_hit], share[soft_hit])
    # hard: both (predicted end, GT end) pairs pass the label-and-IoU test
    begin = np.repeat(np.array(pair_begins, dtype=np.int64), n_gt)[jj]
    g = np.repeat(np.array([gt.n for gt in gts], dtype=np.int64), n_gt)[jj]
    hard_hit = ok[begin + pi * g + rs[jj]] & ok[begin + qi * g + ro[jj]]
    hard = np.zeros(len(gkey))
    np.maximum.at(hard, jj[hard_hit], share[hard_hit])
    hard = hard * copies[rs + offset] * copies[ro + offset]  # copies of one object share its credit

    # the reference adds best * q(subject) * q(object) for the hits only; a miss adds an exact 0.0 here
    soft = sequential_sums(best * qs * qo, n_gt).tolist()
    hard_count = np.bincount(grow, weights=hard, minlength=n_rows).tolist()
    return list(zip(soft, hard_count, strict=True))
