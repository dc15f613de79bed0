"""Hand-written SGG ground-truth rows for the evaluator tests (the dataset schema: JSON strings per field)."""

from __future__ import annotations

import json
from typing import Any


def obj(i: str, b: list[float]) -> dict[str, Any]:
    """An object with id ``i`` (``name.n``) and box ``b`` (x1, y1, x2, y2)."""
    return {"id": i, "bbox": b}


def rel(s: str, p: str, o: str) -> dict[str, str]:
    """A relation between object ids."""
    return {"subject": s, "predicate": p, "object": o}


def row(image_id: str, objects: list[dict[str, Any]], relations: list[dict[str, str]]) -> dict[str, str]:
    """A ground-truth row as the datasets store it."""
    return {"image_id": image_id, "objects": json.dumps(objects), "relationships": json.dumps(relations)}
