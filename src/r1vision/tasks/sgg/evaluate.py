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
from r1vision.tasks.sgg.bbox_ap import BoxAP
from r1vision.tasks.sgg.categories import load_vocabulary, zero_shot_triplets
from r1vision.tasks.sgg.collect import Collector, Normalized, refine
from r1vision.tasks.sgg.data import image_size
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate
from r1vision.tasks.sgg.parse import name_of
from r1vision.tasks.sgg.prediction_files import LazyEntries, LazyRecords, read_predictions
from r1vision.tasks.sgg.predictions import PredGraph, to_pred_graph
from r1vision.vision.budget import PixelBudget
from r1vision.vision.records import PredictionMismatchError

_T = TypeVar("_T")

KS = (20, 50, 100)


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
    norm_o = refine if is_compat else normalize_object
    norm_p = refine if is_compat else normalize_predicate
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
    obj_label, pred_label = Normalized(norm_o), Normalized(norm_p)
    gt_label = Normalized(lambda obj_id: obj_label[name_of(obj_id)])  # by GT object id
    collect = Collector(is_compat, preds_vocab, k_max, zs, ks)
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
