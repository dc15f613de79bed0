"""Ground-truth graphs from dataset columns (the matching itself lives in :mod:`scorer` and :mod:`batch`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from r1vision import compiled
from r1vision.tasks import fastjson
from r1vision.tasks.sgg.parse import name_of


@dataclass(frozen=True)
class GTGraph:
    """Ground truth of one row: ids, names, original-pixel boxes (N x 4) and (s, p, o) id triplets."""

    ids: tuple[str, ...]
    names: tuple[str, ...]
    boxes: np.ndarray
    relations: tuple[tuple[str, str, str], ...]
    # (subject indices, predicates, object indices) of the relations, when the compiled scan found every
    # id unique and every relation's ids known (then they are what ground_truth's Python lookup gives)
    known: tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...]] | None = field(
        default=None, compare=False, repr=False
    )


def _as_list(value: Any) -> list:
    if isinstance(value, str):
        value = fastjson.loads(value) if value.strip() else []
    return list(value or [])


_ID, _BBOX, _SPO = itemgetter("id"), itemgetter("bbox"), itemgetter("subject", "predicate", "object")
_P = itemgetter(1)


def _is_box(value: Any) -> bool:
    """Whether ``value`` is four numbers (the only box shape the ground truth may have)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 4:
        return False
    try:
        return all(not isinstance(v, bool) and np.isfinite(float(v)) for v in value)
    except (TypeError, ValueError):
        return False


_WARNED: set[str] = set()


def _warn_malformed(n: int) -> None:
    import warnings

    if "box" not in _WARNED:
        _WARNED.add("box")
        warnings.warn(
            f"{n} ground-truth object(s) with a malformed bbox (not 4 numbers) left out of the SGG scores; "
            "`r1vision grpo` validates the rows before training unless validate is off",
            stacklevel=3,
        )


@lru_cache(maxsize=8192)
def _gt_from_json(objects: str, relationships: str) -> GTGraph:
    return gt_graph(fastjson.loads(objects or "[]"), fastjson.loads(relationships or "[]"))


def gt_graph(objects: Any, relationships: Any) -> GTGraph:
    """Build a :class:`GTGraph` from dataset columns (JSON strings, cached, or already-decoded lists)."""
    if isinstance(objects, str) and (relationships is None or isinstance(relationships, str)):
        return _gt_from_json(objects, relationships or "[]")
    objs = _as_list(objects)
    rels = _as_list(relationships)
    scan = compiled.scan_truth
    if scan is not None:
        done = scan(objs, rels)  # the clean shape in C; None: the general conversion below
        if done is not None:
            ids, packed, triplets, si, oi = done
            boxes = np.frombuffer(packed, dtype=np.float64).reshape(-1, 4)
            predicates = tuple(map(_P, triplets))
            return GTGraph(ids, tuple(map(name_of, ids)), boxes, triplets, (si, predicates, oi))
    # C-level maps, not Python loops: this runs once per GT row in every reward call
    raw = list(map(_BBOX, objs))
    try:
        boxes = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):  # ragged or non-numeric boxes
        boxes = None
    if boxes is None or boxes.shape != (len(objs), 4):
        # A malformed ground-truth box (not 4 numbers) would misalign every later box; its object is left
        # out, so relations naming it cannot be recalled (they still count in the denominator).
        keep = [i for i, b in enumerate(raw) if _is_box(b)]
        _warn_malformed(len(objs) - len(keep))
        objs = [objs[i] for i in keep]
        boxes = np.asarray([raw[i] for i in keep], dtype=np.float64).reshape(-1, 4)
    ids = tuple(map(str, map(_ID, objs)))
    triplets = tuple(map(_SPO, rels))
    if set(map(type, chain.from_iterable(triplets))) - {str}:  # str() only where it changes something
        triplets = tuple([(str(s), str(p), str(o)) for s, p, o in triplets])
    return GTGraph(ids, tuple(map(name_of, ids)), boxes, triplets)
