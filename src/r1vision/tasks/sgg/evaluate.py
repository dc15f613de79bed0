"""VG150-style scene-graph evaluation: R@K, mR@K, zR@K, ngR@K, ng-mR@K, ng-zR@K, box AP, coverage.

A predicted triplet recalls a GT relation when subject, predicate and object labels agree and both boxes
overlap with IoU >= 0.5. Top-K takes the first K relations in emission order (LLM answers carry no scores).
Two modes:

default
    continuous IoU; labels compared after normalisation (:mod:`labels`: case, ``_``/``-``, plurals,
    synonyms); duplicate triplets dropped; R@K keeps the first predicate of each (subject, object) pair
    (graph constraint), ngR@K keeps them all; each prediction recalls at most one GT relation (maximum
    bipartite matching); images with missing or unparsable predictions count with recall 0; mR averages
    over the predicates that occur in the ground truth.
``compat="r1sgg"``
    R1-SGG's evaluator (Neural-Motifs metrics): IoU with the +1-pixel convention, area ``(x2-x1+1)(y2-y1+1)``;
    labels compared after lowercasing and ``_``/``-`` -> space; R@K on the first K emitted relations as
    they are; one prediction may recall several GT relations; mR averages over all vocabulary predicates
    (absent ones count 0); images with no predicted relation, or absent from the predictions, are excluded
    from R@K/mR/zR/ngR. ngR@K appends, after the emitted relations, the zero-score alternatives of each
    emitted pair (every other predicate, in vocabulary order) as Motifs' no-graph-constraint ranking does
    for one-hot scores (R1-SGG's unstable sort orders those ties arbitrarily).

ng-mR@K and ng-zR@K are mR and zR on the no-graph-constraint candidates. ``AP``/``AP50``/``AP75`` are
COCO-style box AP of the predicted objects (:mod:`bbox_ap`; compat mode: over the predicted images only,
as R1-SGG's COCO evaluator).

Coverage: ``coverage`` is the share of GT images that have a prediction record. Predictions whose ids
match none of the GT ids are an error (a wrong ``--split`` or id field would otherwise score 0 quietly);
partial coverage warns.

All images are scored at once: the loop over images only decodes and ranks; hits, the matching and the
per-image recalls are array operations over all of them (:mod:`recall`, :class:`bbox_ap.BoxAP`), with
the same arithmetic as a per-image computation, so the metrics are the same to the last bit.

All recalls are fractions in [0, 1]; :func:`format_table` prints percentages. zR is 0 when no evaluated
image has a zero-shot GT relation.
"""

from __future__ import annotations

import functools
import gc
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from r1vision.tasks.fastjson import loads
from r1vision.tasks.loading import DatasetLoadError
from r1vision.tasks.sgg import recall
from r1vision.tasks.sgg.bbox_ap import BoxAP
from r1vision.tasks.sgg.categories import load_vocabulary, zero_shot_triplets
from r1vision.tasks.sgg.data import image_size
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate
from r1vision.tasks.sgg.parse import name_of
from r1vision.tasks.sgg.predictions import (
    LazyEntries,
    LazyRecords,
    PredGraph,
    read_predictions,
    to_pred_graph,
)
from r1vision.vision.budget import PixelBudget
from r1vision.vision.records import PredictionMismatchError

_T = TypeVar("_T")

KS = (20, 50, 100)


def _refine(text: str) -> str:
    return str(text).replace("_", " ").replace("-", " ").strip().lower()


def _gt_sizes(row: dict[str, Any]) -> tuple[Any, Any]:

    orig, resized = row.get("original_image_sizes"), row.get("image_sizes")
    if orig is None:
        for key in ("image", "images"):
            value = row.get(key)
            if isinstance(value, list):
                value = value[0] if value else None
            if value is not None:
                try:
                    orig = image_size(value, row.get("_root"))
                except (OSError, ValueError):
                    orig = None
                break
    return orig, resized


def _decoded(value: Any) -> list:
    """A GT column as a list: JSON text decoded (empty text = no items), None = no items."""
    if isinstance(value, str):
        return loads(value or "[]")
    return list(value or [])


class _Normalized(dict):
    """``normalize(label)`` by subscription, computed once per distinct label (an evaluation sees each
    label many times; a dict lookup is the cheapest call)."""

    def __init__(self, normalize: Callable[[str], str]) -> None:
        super().__init__()
        self.normalize = normalize

    def __missing__(self, label: str) -> str:
        value = self[label] = self.normalize(label)
        return value


class _Collector:
    """Flat arrays of every evaluated image's GT relations and ranked candidates for :mod:`recall`."""

    CHUNK = 4096  # images whose recall is computed together (each image's values depend on it alone)

    def __init__(
        self, compat: bool, predicates: Sequence[str], k_max: int, zero_shot: set, ks: Sequence[int]
    ) -> None:
        self.compat, self.k_max, self.zero_shot, self.ks = compat, k_max, zero_shot, list(ks)
        self.fill_predicates = [_refine(q) for q in predicates]
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

    def add_gt(self, labels: list[str], boxes: np.ndarray, relations: list, pred: _Normalized) -> None:
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

    def add_candidates(self, triplets: list, obj: _Normalized, pred: _Normalized) -> None:
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


class GroundTruthError(DatasetLoadError):
    """A ground-truth row the evaluator cannot read; the message names the row and the field."""


def _gt_boxes(objs: list[dict[str, Any]], number: int, image_id: str) -> np.ndarray:
    """The row's GT boxes (N x 4); a box that is not 4 numbers is an error naming the row and object."""
    try:
        boxes = np.asarray([o["bbox"] for o in objs], dtype=np.float64)
    except (TypeError, ValueError, KeyError):
        boxes = None
    if boxes is None or boxes.shape != (len(objs), 4):
        bad = next(
            (o for o in objs if not isinstance(o.get("bbox"), (list, tuple)) or len(o["bbox"]) != 4), objs[0]
        )
        raise GroundTruthError(
            f"ground truth row {number} (image_id={image_id!r}): object {bad.get('id')!r} has bbox "
            f"{bad.get('bbox')!r}, not 4 numbers [x1, y1, x2, y2]"
        )
    return boxes


def _iter_gt(gt_rows: Any, split: str) -> Iterable[dict[str, Any]]:
    if isinstance(gt_rows, (str, Path)):
        from r1vision.tasks.loading import locate, read_json_lines

        where = locate(gt_rows, split)
        rows = read_json_lines(where)
        if rows is not None:  # JSON lines: read row by row (no `datasets` import, no Arrow conversion)
            return _with_root(rows, str(where.root) if where.root else None)
        from r1vision.tasks.sgg.data import load_raw

        gt_rows, root = load_raw(gt_rows, split)
        gt_rows = (
            gt_rows.add_column("_root", [str(root) if root else None] * len(gt_rows)) if root else gt_rows
        )
    datasets = sys.modules.get("datasets")  # not imported: rows cannot be a Dataset (saves ~1 s)
    if datasets is not None and isinstance(gt_rows, datasets.Dataset):
        if isinstance(gt_rows.features.get("image"), datasets.Image):
            gt_rows = gt_rows.cast_column("image", datasets.Image(decode=False))
        drop = [
            c for c in gt_rows.column_names if c in ("prompt", "completion", "prompt_open", "prompt_close")
        ]
        gt_rows = gt_rows.remove_columns(drop)
    return gt_rows


def _with_root(rows: Iterable[dict[str, Any]], root: str | None) -> Iterator[dict[str, Any]]:
    for row in rows:
        for c in ("prompt", "completion", "prompt_open", "prompt_close"):
            row.pop(c, None)  # long texts the evaluation never reads
        if root:
            row["_root"] = root
        yield row


def _gc_paused(func: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``func`` with the cyclic garbage collector off (restored afterwards)."""

    # The evaluation loop allocates millions of short-lived, acyclic tuples and arrays; the cyclic garbage
    # collector would walk all loaded predictions again and again (~25 % of the time at VG150 size).
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> _T:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return wrapper


@_gc_paused
def evaluate_sgg(
    gt_rows: Any,
    predictions: Any,
    compat: str | None = None,
    *,
    model_family: str | None = None,
    budget: PixelBudget | None = None,
    vocab: str = "vg150",
    predicates: Sequence[str] | None = None,
    zero_shot: Iterable[tuple[str, str, str]] | None = None,
    ks: Sequence[int] = KS,
    split: str = "val",
    records: list[dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Flat metrics dict (``R@K``, ``mR@K``, ``zR@K``, ``ngR@K``, ``parse_failure_rate``, ``num_images``).

    ``gt_rows``: rows with ``image_id``, ``objects``, ``relationships`` (a Dataset, a list of dicts, or a
    Hub id / local path). ``predictions``: a path (see :func:`read_predictions`), a dict keyed by image id,
    or a list aligned with ``gt_rows`` (completion strings or records). Per-image details are appended to
    ``records`` when given.
    """
    if compat not in (None, "r1sgg"):
        raise ValueError(f"unknown compat mode {compat!r}; use None or 'r1sgg'")
    is_compat = compat == "r1sgg"
    vocabulary = load_vocabulary(vocab)
    preds_vocab = list(predicates) if predicates is not None else list(vocabulary.predicates)
    zs_source = zero_shot if zero_shot is not None else zero_shot_triplets(vocab)
    norm_o = _refine if is_compat else normalize_object
    norm_p = _refine if is_compat else normalize_predicate
    zs = {(norm_o(s), norm_p(p), norm_o(o)) for s, p, o in zs_source}
    rows: Iterable[dict[str, Any]] = _iter_gt(gt_rows, split)  # read row by row: memory stays flat
    if isinstance(predictions, (str, Path)):
        predictions = read_predictions(predictions)
    if isinstance(predictions, (list, tuple)):
        rows = list(rows)
        if len(predictions) != len(rows):
            raise ValueError(f"{len(predictions)} predictions for {len(rows)} GT rows")
        predictions = {str(r["image_id"]): p for r, p in zip(rows, predictions, strict=False)}
    if not isinstance(
        predictions, (LazyEntries, LazyRecords)
    ):  # (that one decodes an image when asked for it)
        predictions = {str(k): v for k, v in dict(predictions).items()}
    gt_ids: list[str] = []
    k_max = max(ks)
    obj_label, pred_label = _Normalized(norm_o), _Normalized(norm_p)
    gt_label = _Normalized(lambda obj_id: obj_label[name_of(obj_id)])  # by GT object id
    collect = _Collector(is_compat, preds_vocab, k_max, zs, ks)
    details: list[dict[str, Any]] = []
    ap = BoxAP(first_box_numbered_zero=is_compat)
    n_records = n_failed = n_without = 0
    zero_open = True  # R1-SGG numbers the dataset's first GT box 0 (see bbox_ap.BoxAP)
    n_images = 0
    for number, row in enumerate(rows):
        image_id = str(row["image_id"])
        gt_ids.append(image_id)
        objs, rels = _decoded(row.get("objects")), _decoded(row.get("relationships"))
        first_box_here, zero_open = zero_open and bool(objs), zero_open and not objs
        ids = [str(o["id"]) for o in objs]
        gt_norm = [gt_label[i] for i in ids]
        boxes = _gt_boxes(objs, number, image_id)
        # a repeated GT id: the first object, as before (the dict keeps the last value written)
        index = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1)))  # noqa: B905
        rel_ids = [(str(r["subject"]), str(r["predicate"]), str(r["object"])) for r in rels]
        record = predictions.get(image_id)
        pred = PredGraph(error="missing")
        if record is not None:
            n_records += 1
            needs_size = isinstance(record, str) or (isinstance(record, dict) and "completion" in record)
            orig, resized = _gt_sizes(row) if needs_size else (None, None)
            pred = to_pred_graph(
                record,
                predicates=preds_vocab,
                objects=vocabulary.objects,
                model_family=model_family,
                original_size=orig,
                image_size=resized,
                budget=budget,
                r1sgg=is_compat,
            )
            n_failed += pred.error is not None
            n_without += pred.error == "no_completion"
            if is_compat and pred.placeholder:  # R1-SGG keeps nothing of such an answer but its placeholder
                pred = PredGraph(error=pred.error, placeholder=True)
        if record is not None or not is_compat:  # R1-SGG's COCO evaluator sees the predicted images only
            ap.add(
                image_id,
                gt_norm,
                boxes,
                [obj_label[n] for n, _ in pred.objects],
                [b for _, b in pred.objects],
                first_of_dataset=first_box_here,
            )
        if not rel_ids or (is_compat and (record is None or not (pred.triplets or pred.placeholder))):
            continue
        collect.add_gt(gt_norm, boxes, [(index[s], p, index[o]) for s, p, o in rel_ids], pred_label)
        collect.add_candidates(pred.triplets, obj_label, pred_label)
        n_images += 1
        if records is not None:  # per-image details only when asked for (they grow with the dataset)
            details.append(
                {
                    "image_id": image_id,
                    "error": pred.error,
                    "num_gt": len(rel_ids),
                    "num_pred": len(pred.triplets),
                }
            )

    coverage = _coverage(gt_ids, predictions)
    constrained, unconstrained, pred_names, met = collect.tables()
    if is_compat:  # every vocabulary predicate counts; absent ones as 0
        code = {name: i for i, name in enumerate(pred_names)}
        order = [code.get(norm_p(p)) for p in preds_vocab]
    else:  # the predicates of the ground truth
        order = met

    def mean_recall(table: dict[int, np.ndarray]) -> float:
        means = [float(np.mean(table[c])) if c in table else 0.0 for c in order]
        return float(np.mean(means)) if means else 0.0

    metrics: dict[str, float] = {}
    for name, part, which in (
        ("R", 0, constrained),
        ("zR", 1, constrained),
        ("ngR", 0, unconstrained),
        ("ng-zR", 1, unconstrained),
    ):
        for k in ks:
            values = which[k][part]
            metrics[f"{name}@{k}"] = float(np.mean(values)) if len(values) else 0.0
    for k in ks:
        metrics[f"mR@{k}"] = mean_recall(constrained[k][2])
        metrics[f"ng-mR@{k}"] = mean_recall(unconstrained[k][2])
    if records is not None:
        for i, detail in enumerate(details):
            for k in ks:
                detail[f"R@{k}"] = float(constrained[k][0][i])
        records.extend(details)
    metrics.update(ap.result())
    metrics["parse_failure_rate"] = n_failed / n_records if n_records else 0.0
    metrics["num_images"] = float(n_images)
    metrics.update(coverage)
    if n_without:  # records whose completion is lost cover nothing: failures, not empty graphs
        metrics["coverage"] -= n_without / max(metrics["num_gt_images"], 1.0)
        warnings.warn(
            f"{n_without} prediction record(s) carry no completion; they count as failures", stacklevel=2
        )
    metrics["records_without_completion"] = float(n_without)
    return metrics


def _coverage(gt_ids: list[str], predictions: Any) -> dict[str, float]:
    """How many GT images have predictions; an error when none do (ids from another split or field)."""
    rows = gt_ids
    matched = sum(i in predictions for i in gt_ids)
    if rows and not predictions:
        raise PredictionMismatchError(f"no predictions for the {len(rows)} ground-truth images")
    if rows and matched == 0:
        raise PredictionMismatchError(
            f"none of the {len(predictions)} prediction ids matches any of the {len(rows)} ground-truth "
            f"image ids (e.g. prediction {next(iter(predictions))!r}, ground truth {gt_ids[0]!r}): "
            "wrong --split, or predictions of another dataset?"
        )
    extra = len(set(predictions) - set(gt_ids))
    if matched < len(rows) or extra:
        warnings.warn(
            f"predictions cover {matched} of {len(rows)} ground-truth images"
            + (f"; {extra} prediction ids are not in the ground truth" if extra else ""),
            stacklevel=4,
        )
    return {
        "coverage": matched / len(rows) if rows else 0.0,
        "num_gt_images": float(len(rows)),
        "num_predictions": float(len(predictions)),
        "unmatched_predictions": float(extra),
    }


def format_table(metrics: dict[str, float], ks: Sequence[int] = KS) -> str:
    """A plain-text table of the metrics (recalls in percent)."""
    lines = ["metric  " + "".join(f"{'@' + str(k):>9}" for k in ks)]
    for name in ("R", "mR", "zR", "ngR", "ng-mR", "ng-zR"):
        values = [metrics.get(f"{name}@{k}") for k in ks]
        lines.append(
            f"{name:<8}" + "".join(f"{100 * v:9.2f}" if v is not None else f"{'-':>9}" for v in values)
        )
    if "AP" in metrics:
        lines.append(
            f"box AP {100 * metrics['AP']:.2f}   AP50 {100 * metrics['AP50']:.2f}   "
            f"AP75 {100 * metrics['AP75']:.2f}"
        )
    lines.append(
        f"parse failures: {100 * metrics.get('parse_failure_rate', 0.0):.2f}%   "
        f"images: {int(metrics.get('num_images', 0))}   "
        f"coverage: {100 * metrics.get('coverage', 1.0):.2f}%"
    )
    return "\n".join(lines)
