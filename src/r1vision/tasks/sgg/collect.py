"""The per-image bookkeeping of SGG evaluation: label normalisation caches and the collector of each
image's ground-truth relations and ranked candidates, turned into recall tables a chunk of images at a time
(:mod:`.recall` does the matching; :mod:`.evaluate` drives it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from r1vision.tasks.sgg import recall


def refine(text: str) -> str:
    """R1-SGG's label refinement: underscores and hyphens to spaces, stripped, lower case."""
    return str(text).replace("_", " ").replace("-", " ").strip().lower()


class Normalized(dict):
    """``normalize(label)`` by subscription, computed once per distinct label (an evaluation sees each
    label many times; a dict lookup is the cheapest call)."""

    def __init__(self, normalize: Callable[[str], str]) -> None:
        super().__init__()
        self.normalize = normalize

    def __missing__(self, label: str) -> str:
        value = self[label] = self.normalize(label)
        return value


class Collector:
    """Flat arrays of every evaluated image's GT relations and ranked candidates for :mod:`recall`."""

    CHUNK = 4096  # images whose recall is computed together (each image's values depend on it alone)

    def __init__(
        self, compat: bool, predicates: Sequence[str], k_max: int, zero_shot: set, ks: Sequence[int]
    ) -> None:
        self.compat, self.k_max, self.zero_shot, self.ks = compat, k_max, zero_shot, list(ks)
        self.fill_predicates = [refine(q) for q in predicates]
        self.fill_column = {q: i for i, q in reversed(list(enumerate(self.fill_predicates)))}
        self.triplets: dict[tuple[str, str, str], int] = {}  # label triplet -> code
        self.pred_names: dict[str, int] = {}  # predicate -> code, in the order triplets meet them
        self.trip_pred: list[int] = []  # per triplet code, its predicate code
        self.trip_zs: list[bool] = []  # per triplet code, whether it is zero-shot
        self.first_image: dict[int, int] = {}  # predicate code -> first image (evaluation order) with it
        self.done = 0  # images whose recall is computed
        # per ranking (constrained, unconstrained) and K: recall per image, zero-shot recall per image,
        # {predicate code: recall per image}, as lists of per-chunk arrays
        self.parts: list[dict[int, tuple[list, list, dict[int, list]]]] = [
            {k: ([], [], {}) for k in self.ks} for _ in range(2)
        ]
        self._reset_chunk()

    def _reset_chunk(self) -> None:
        self.n_images = 0  # images of the current chunk
        self.gt_image: list[int] = []
        self.gt_triplet: list[int] = []
        self.gt_objects: list[np.ndarray] = []  # per image, its objects' boxes (n x 4)
        self.n_objects = 0
        self.gt_subject: list[int] = []  # per GT relation, its subject's row in the objects of all images
        self.gt_object: list[int] = []
        self.cand_image: list[int] = []
        self.cand_triplet: list[int] = []
        self.cand_ng: list[int] = []  # rank without graph constraint, -1: beyond K
        self.cand_c: list[int] = []  # rank with graph constraint, -1: not in that ranking
        self.cand_boxes: list[np.ndarray] = []  # per image, 2n x 4 (subject box, object box, ...)

    def add_gt(self, labels: list[str], boxes: np.ndarray, relations: list, pred: Normalized) -> None:
        """The image's GT relations: ``relations`` are (subject row, predicate, object row) into ``labels``
        (normalised object labels) and ``boxes``."""
        codes, base = self.triplets, self.n_objects
        trip = [(labels[s], pred[p], labels[o]) for s, p, o in relations]
        for t in trip:
            if t not in codes:  # a new label triplet: its code, predicate code and zero-shot flag
                codes[t] = len(codes)
                self.trip_pred.append(self.pred_names.setdefault(t[1], len(self.pred_names)))
                self.trip_zs.append(t in self.zero_shot)
        self.gt_triplet.extend([codes[t] for t in trip])
        self.gt_subject.extend([base + s for s, _, _ in relations])
        self.gt_object.extend([base + o for _, _, o in relations])
        self.gt_image.extend([self.n_images] * len(relations))
        self.gt_objects.append(boxes)
        self.n_objects += len(boxes)

    def add_candidates(self, triplets: list, obj: Normalized, pred: Normalized) -> None:
        """Rank the image's predicted triplets (see module docstring) and keep those whose label triplet
        occurs in some GT (no other can hit)."""
        codes, k_max = self.triplets, self.k_max
        kept: list[tuple[int, int, int]] = []  # triplet code, ng rank, constrained rank
        boxes: list = []  # subject and object box of each kept candidate
        if self.compat:
            # R1-SGG's rankings of an answer's relations (its SGRecall / SGNoGraphConstraintRecall): with
            # graph constraint the first K in emission order; without it numpy's argsort of the negated
            # one-hot scores (relations x vocabulary predicates), whose ties between the emitted (score 1)
            # and the zero-score (pair, other predicate) entries fall in the order that unstable sort gives.
            emitted = [(obj[s], sb, obj[o], ob, pred[p]) for s, sb, o, ob, p, _, _ in triplets]
            cols = [self.fill_column.get(e[4]) for e in emitted]
            emitted = [e for e, c in zip(emitted, cols, strict=True) if c is not None]
            cols = [c for c in cols if c is not None]
            ranks: dict[tuple[int, int], list[int]] = {
                (r, cols[r]): [-1, r] for r in range(min(len(emitted), k_max))
            }
            if emitted:
                scores = np.zeros((len(emitted), len(self.fill_predicates)))
                scores[np.arange(len(emitted)), cols] = 1.0
                order = np.argsort(-scores.ravel())[:k_max]  # R1-SGG's argsort_desc, [:100]
                rows, columns = np.unravel_index(order, scores.shape)
                for rank, key in enumerate(zip(rows.tolist(), columns.tolist(), strict=True)):
                    ranks.setdefault(key, [-1, -1])[0] = rank
            for (r, c), (ng, constrained) in ranks.items():
                s, sb, o, ob, _ = emitted[r]
                t = codes.get((s, self.fill_predicates[c], o))
                if t is not None:
                    kept.append((t, ng, constrained))
                    boxes += (sb, ob)
        else:
            seen: set[tuple[str, str, str]] = set()
            pairs: set[tuple[str, str]] = set()
            rank = n_pos = 0
            for s, sb, o, ob, p, sid, oid in triplets:
                if rank >= k_max and n_pos >= k_max:
                    break
                p = pred[p]
                if (sid, p, oid) in seen:  # a duplicate triplet
                    continue
                seen.add((sid, p, oid))
                pos = -1
                if (sid, oid) not in pairs:  # the pair's first predicate: in the graph-constrained ranking
                    pairs.add((sid, oid))
                    pos = n_pos if n_pos < k_max else -1
                    n_pos += 1
                t = codes.get((obj[s], p, obj[o]))
                if t is not None and (rank < k_max or pos >= 0):
                    kept.append((t, rank if rank < k_max else -1, pos))
                    boxes += (sb, ob)
                rank += 1
        if kept:
            trip, ng, c = zip(*kept, strict=True)
            self.cand_triplet.extend(trip)
            self.cand_ng.extend(ng)
            self.cand_c.extend(c)
            self.cand_image.extend([self.n_images] * len(kept))
            self.cand_boxes.append(np.array(boxes, dtype=np.float64).reshape(-1, 4))
        self.n_images += 1
        if self.n_images >= self.CHUNK:
            self._flush()

    def _flush(self) -> None:
        """Recall tables (:func:`recall.recall_tables`) of the chunk's images with and without graph
        constraint, appended to :attr:`parts`; the chunk's relations and candidates are then dropped."""
        if not self.n_images:
            return
        trip_pred = np.array(self.trip_pred, dtype=np.int64)
        trip_zs = np.array(self.trip_zs, dtype=bool)
        gt_trip = np.array(self.gt_triplet, dtype=np.int64)
        gt_image = np.array(self.gt_image, dtype=np.int64)
        n_trip = max(len(self.triplets), 1)
        cand_image = np.array(self.cand_image, dtype=np.int64)
        gt_key = gt_image * n_trip + gt_trip
        objects = np.concatenate(self.gt_objects) if self.gt_objects else np.zeros((0, 4))
        ci, gi = recall.hit_pairs(
            gt_key,
            np.concatenate([objects[self.gt_subject], objects[self.gt_object]], axis=1),
            cand_image * n_trip + np.array(self.cand_triplet, dtype=np.int64),
            np.concatenate(self.cand_boxes).reshape(-1, 8) if self.cand_boxes else np.zeros((0, 8)),
            self.compat,
        )
        for parts, ranks in zip(self.parts, (self.cand_c, self.cand_ng), strict=True):
            first = recall.first_recalled(
                len(gt_trip), ci, gi, np.array(ranks, dtype=np.int64), gt_key, not self.compat
            )
            tables = recall.recall_tables(
                first, gt_image, self.n_images, trip_pred[gt_trip], trip_zs[gt_trip], self.ks
            )
            for k, (rec, zrec, table) in tables.items():
                parts[k][0].append(rec)
                parts[k][1].append(zrec)
                for code, values in table.items():
                    parts[k][2].setdefault(code, []).append(values)
        first_image = np.full(len(self.pred_names), len(gt_image), dtype=np.int64)
        np.minimum.at(first_image, trip_pred[gt_trip], gt_image)
        for code in np.unique(trip_pred[gt_trip]).tolist():
            self.first_image.setdefault(code, self.done + int(first_image[code]))
        self.done += self.n_images
        self._reset_chunk()

    def tables(self) -> tuple[dict, dict, list[str], list[int]]:
        """Per ranking (constrained, unconstrained) and K: (recall per image, zero-shot recall per image
        that has zero-shot GT, {predicate code: its recall per image where it occurs, in image order}); the
        predicate of each predicate code, and the predicate codes in the order a per-image loop meets them
        (by first image, then by name). Each image's values are the ones a single pass over all images
        gives: chunks only bound the memory."""
        self._flush()
        out = []
        for parts in self.parts:
            joined = {}
            for k, (rec, zrec, table) in parts.items():
                joined[k] = (
                    np.concatenate(rec) if rec else np.zeros(0),
                    np.concatenate(zrec) if zrec else np.zeros(0),
                    {code: np.concatenate(values) for code, values in sorted(table.items())},
                )
            out.append(joined)
        names = list(self.pred_names)
        met = sorted(range(len(names)), key=lambda c: (self.first_image.get(c, self.done), names[c]))
        return out[0], out[1], names, met
