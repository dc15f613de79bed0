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

All recalls are fractions in [0, 1]; :func:`format_table` prints percentages. zR is 0 when no evaluated
image has a zero-shot GT relation.
"""

from __future__ import annotations

import functools
import gc
import itertools
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from scipy.optimize import linear_sum_assignment

from r1vision.tasks.sgg.bbox_ap import box_ap
from r1vision.tasks.sgg.categories import load_vocabulary, zero_shot_triplets
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate
from r1vision.tasks.sgg.matching import gt_graph
from r1vision.tasks.sgg.predictions import LazyEntries, PredGraph, read_predictions, to_pred_graph

_T = TypeVar("_T")

KS = (20, 50, 100)


def _refine(text: str) -> str:
    return str(text).replace("_", " ").replace("-", " ").strip().lower()


def _gt_sizes(row: dict[str, Any]) -> tuple[Any, Any]:
    from r1vision.tasks.sgg.data import image_size

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


class _GTSide:
    """GT relations of one image encoded once: label codes and box arrays for :func:`_hit_matrix`."""

    def __init__(self, gt_trips: list) -> None:
        self.codes: dict[str, int] = {}
        enc = self.encode
        self.s, self.o, self.p = enc(gt_trips, 0), enc(gt_trips, 2), enc(gt_trips, 4)
        self.sbox = np.array([t[1] for t in gt_trips], dtype=np.float64).reshape(-1, 4)
        self.obox = np.array([t[3] for t in gt_trips], dtype=np.float64).reshape(-1, 4)
        self.n = len(gt_trips)

    def encode(self, items: list, idx: int) -> np.ndarray:
        setdefault, codes = self.codes.setdefault, self.codes
        return np.array([setdefault(t[idx], len(codes)) for t in items], dtype=np.int64)


def _pair_iou(a: np.ndarray, b: np.ndarray, plus_one: bool) -> np.ndarray:
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


def _hit_matrix(gt: _GTSide, cands: list, compat: bool) -> np.ndarray:
    """``hit[i, j]``: candidate i (in ranking order) matches GT relation j (labels equal, both IoUs >= 0.5).

    Labels are compared as integer codes first; IoUs are computed only for the label-matching pairs (a
    VG150-sized evaluation has 5,000 images with up to 100 x 100 candidate/GT pairs each).
    """
    hit = np.zeros((len(cands), gt.n), dtype=bool)
    if not cands or not gt.n:
        return hit
    same = (gt.encode(cands, 0)[:, None] == gt.s[None, :]) & (gt.encode(cands, 4)[:, None] == gt.p[None, :])
    same &= gt.encode(cands, 2)[:, None] == gt.o[None, :]
    rows, cols = np.nonzero(same)
    if len(rows):
        sbox = np.array([cands[i][1] for i in rows.tolist()], dtype=np.float64).reshape(-1, 4)
        obox = np.array([cands[i][3] for i in rows.tolist()], dtype=np.float64).reshape(-1, 4)
        ok = (_pair_iou(sbox, gt.sbox[cols], compat) >= 0.5) & (_pair_iou(obox, gt.obox[cols], compat) >= 0.5)
        hit[rows[ok], cols[ok]] = True
    return hit


def _recalled(hit: np.ndarray, ks: Sequence[int], compat: bool) -> dict[int, np.ndarray]:
    """For each K, the mask of GT relations recalled by the top-K candidates of a hit matrix."""
    n_gt = hit.shape[1]
    if not hit.size:
        return {k: np.zeros(n_gt, dtype=bool) for k in ks}
    covered = hit.any(axis=0)
    if compat or hit.sum(axis=1).max() <= 1:
        # compat: any one prediction may recall a GT relation (R1-SGG); a candidate hitting at most one
        # GT relation makes the one-to-one matching trivial: a relation is recalled from its first hit on
        first = np.where(covered, hit.argmax(axis=0), np.iinfo(np.int64).max)
        return {k: first < k for k in ks}
    out = {}
    for k in ks:
        top = hit[:k]
        rows, cols = linear_sum_assignment(-top.astype(np.float64))  # each prediction recalls at most one
        mask = np.zeros(n_gt, dtype=bool)
        mask[cols[top[rows, cols]]] = True
        out[k] = mask
    return out


def _candidates(pred: PredGraph, compat: bool, predicates: Sequence[str], k_max: int) -> tuple[list, list]:
    """(positions in the no-graph-constraint list of the graph-constrained candidates, the
    no-graph-constraint candidates), in ranking order, label-normalised."""
    norm_o = _refine if compat else normalize_object
    norm_p = _refine if compat else normalize_predicate
    trips = [
        (norm_o(s), sb, norm_o(o), ob, norm_p(p), sid, oid) for s, sb, o, ob, p, sid, oid in pred.triplets
    ]
    if compat:
        ng = [t[:5] for t in trips]
        positions = list(range(len(ng)))
        if (
            len(ng) < k_max
        ):  # Motifs ranks the zero-score predicates of each emitted pair after all emitted ones
            fill = (
                (s, sb, o, ob, _refine(q))
                for s, sb, o, ob, p, _, _ in trips
                for q in predicates
                if _refine(q) != p
            )
            ng.extend(itertools.islice(fill, k_max - len(ng)))
        return positions, ng
    seen, pairs, positions, ng = set(), set(), [], []
    for t in trips:
        key = (t[5], t[4], t[6])
        if key in seen:
            continue
        seen.add(key)
        if (t[5], t[6]) not in pairs:
            pairs.add((t[5], t[6]))
            positions.append(len(ng))
        ng.append(t[:5])
    return positions, ng


def _iter_gt(gt_rows: Any, split: str) -> Iterable[dict[str, Any]]:
    if isinstance(gt_rows, (str, Path)):
        from r1vision.tasks.loading import locate, read_json_lines

        where = locate(gt_rows, split)
        rows = read_json_lines(where)
        if rows is not None:  # JSON lines: read directly (no `datasets` import, no Arrow conversion)
            drop = ("prompt", "completion", "prompt_open", "prompt_close")
            root = str(where.root) if where.root else None
            for row in rows:
                for c in drop:
                    row.pop(c, None)
                if root:
                    row["_root"] = root
            return rows
        from r1vision.tasks.sgg.data import load_raw

        gt_rows, root = load_raw(gt_rows, split)
        gt_rows = (
            gt_rows.add_column("_root", [str(root) if root else None] * len(gt_rows)) if root else gt_rows
        )
    try:
        import datasets

        if isinstance(gt_rows, datasets.Dataset):
            if isinstance(gt_rows.features.get("image"), datasets.Image):
                gt_rows = gt_rows.cast_column("image", datasets.Image(decode=False))
            drop = [
                c
                for c in gt_rows.column_names
                if c in ("prompt", "completion", "prompt_open", "prompt_close")
            ]
            gt_rows = gt_rows.remove_columns(drop)
    except ImportError:  # pragma: no cover - datasets is a dependency
        pass
    return gt_rows


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
    min_pixels: int | None = None,
    max_pixels: int | None = None,
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
    rows = list(_iter_gt(gt_rows, split))
    if isinstance(predictions, (str, Path)):
        predictions = read_predictions(predictions)
    if isinstance(predictions, (list, tuple)):
        if len(predictions) != len(rows):
            raise ValueError(f"{len(predictions)} predictions for {len(rows)} GT rows")
        predictions = {str(r["image_id"]): p for r, p in zip(rows, predictions, strict=False)}
    if not isinstance(predictions, LazyEntries):  # (that one decodes an image when asked for it)
        predictions = {str(k): v for k, v in dict(predictions).items()}
    coverage = _coverage(rows, predictions)
    k_max = max(ks)

    recall = {k: [] for k in ks}
    ng_recall = {k: [] for k in ks}
    zs_recall = {k: [] for k in ks}
    ng_zs_recall = {k: [] for k in ks}
    per_pred = {k: defaultdict(list) for k in ks}
    ng_per_pred = {k: defaultdict(list) for k in ks}
    ap_images: list[tuple[str, list, list]] = []
    n_records = n_failed = 0
    for row in rows:
        image_id = str(row["image_id"])
        gt = gt_graph(row["objects"], row["relationships"])
        gt_norm = [norm_o(x) for x in gt.names]
        index: dict[str, int] = {}
        for i, gid in enumerate(gt.ids):
            index.setdefault(gid, i)  # a repeated GT id: the first object, as before
        boxes = gt.boxes.tolist()
        gt_trips = [(gt_norm[index[s]], boxes[index[s]], gt_norm[index[o]], boxes[index[o]], norm_p(p))
                    for s, p, o in gt.relations]  # fmt: skip
        record = predictions.get(image_id)
        pred = PredGraph(error="missing")
        if record is not None:
            n_records += 1
            needs_size = isinstance(record, str) or (isinstance(record, dict) and "completion" in record)
            orig, resized = _gt_sizes(row) if needs_size else (None, None)
            pred = to_pred_graph(
                record, predicates=preds_vocab, objects=vocabulary.objects, model_family=model_family,
                original_size=orig, image_size=resized, min_pixels=min_pixels, max_pixels=max_pixels,
                r1sgg=is_compat,
            )  # fmt: skip
            n_failed += pred.error is not None
            if is_compat and pred.placeholder:  # R1-SGG keeps nothing of such an answer but its placeholder
                pred = PredGraph(error=pred.error, placeholder=True)
        if record is not None or not is_compat:  # R1-SGG's COCO evaluator sees the predicted images only
            ap_images.append(
                (image_id, list(zip(gt_norm, boxes, strict=True)), [(norm_o(n), b) for n, b in pred.objects])
            )
        if not gt_trips or (is_compat and (record is None or not (pred.triplets or pred.placeholder))):
            continue
        positions, ng = _candidates(pred, is_compat, preds_vocab, k_max)
        positions = positions[:k_max]
        zs_mask = np.array([(t[0], t[4], t[2]) in zs for t in gt_trips], dtype=bool)
        n_zs = int(zs_mask.sum())
        pred_names = sorted({t[4] for t in gt_trips})
        pred_code = np.array([pred_names.index(t[4]) for t in gt_trips], dtype=np.int64)
        pred_count = np.bincount(pred_code, minlength=len(pred_names))
        detail = {
            "image_id": image_id,
            "error": pred.error,
            "num_gt": len(gt_trips),
            "num_pred": len(pred.triplets),
        }
        # one hit matrix: the constrained candidates are a subset of the unconstrained ones
        needed = max(min(len(ng), k_max), positions[-1] + 1 if positions else 0)
        hit_all = _hit_matrix(_GTSide(gt_trips), ng[:needed], is_compat)
        hit_ng, hit_c = hit_all[:k_max], hit_all[positions]
        n_gt = len(gt_trips)
        rec_c, rec_ng = _recalled(hit_c, ks, is_compat), _recalled(hit_ng, ks, is_compat)
        for k in ks:
            for mask, rec, zrec, table in (
                (rec_c[k], recall[k], zs_recall[k], per_pred[k]),
                (rec_ng[k], ng_recall[k], ng_zs_recall[k], ng_per_pred[k]),
            ):
                rec.append(int(mask.sum()) / n_gt)
                if n_zs:
                    zrec.append(int((mask & zs_mask).sum()) / n_zs)
                per = np.bincount(pred_code, weights=mask, minlength=len(pred_names)) / pred_count
                for name, value in zip(pred_names, per.tolist(), strict=True):
                    table[name].append(value)
            detail[f"R@{k}"] = recall[k][-1]
        if records is not None:
            records.append(detail)

    def mean_recall(table: dict[str, list[float]]) -> float:
        if is_compat:  # every vocabulary predicate counts; absent ones as 0
            means = [float(np.mean(table[norm_p(p)])) if table.get(norm_p(p)) else 0.0 for p in preds_vocab]
        else:
            means = [float(np.mean(v)) for v in table.values()]
        return float(np.mean(means)) if means else 0.0

    metrics: dict[str, float] = {}
    for name, source in (("R", recall), ("zR", zs_recall), ("ngR", ng_recall), ("ng-zR", ng_zs_recall)):
        for k in ks:
            metrics[f"{name}@{k}"] = float(np.mean(source[k])) if source[k] else 0.0
    for k in ks:
        metrics[f"mR@{k}"] = mean_recall(per_pred[k])
        metrics[f"ng-mR@{k}"] = mean_recall(ng_per_pred[k])
    metrics.update(box_ap(ap_images))
    metrics["parse_failure_rate"] = n_failed / n_records if n_records else 0.0
    metrics["num_images"] = float(len(recall[ks[0]]))
    metrics.update(coverage)
    return metrics


def _coverage(rows: list[dict[str, Any]], predictions: dict[str, Any]) -> dict[str, float]:
    """How many GT images have predictions; an error when none do (ids from another split or field)."""
    gt_ids = [str(r["image_id"]) for r in rows]
    matched = sum(i in predictions for i in gt_ids)
    if rows and not predictions:
        raise ValueError(f"no predictions for the {len(rows)} ground-truth images")
    if rows and matched == 0:
        raise ValueError(
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
        lines.append(f"box AP {100 * metrics['AP']:.2f}   AP50 {100 * metrics['AP50']:.2f}   "
                     f"AP75 {100 * metrics['AP75']:.2f}")  # fmt: skip
    lines.append(f"parse failures: {100 * metrics.get('parse_failure_rate', 0.0):.2f}%   "
                 f"images: {int(metrics.get('num_images', 0))}   "
                 f"coverage: {100 * metrics.get('coverage', 1.0):.2f}%")  # fmt: skip
    return "\n".join(lines)
