"""R1-SGG's gatherer (``src/sgg_gather_preds.py``) as a reader of completions, for ``--compat r1sgg``.

What it accepts, and nothing else (the answer shapes are the rules of R1-SGG's gathering step):

- the text with every ```` ``` ```` and every ``json`` replaced by a space; then what lies between the first
  ``<answer>`` and the next ``</answer>``, else everything after the first ``<answer>``, else all of it;
- ``json.loads`` of that (Python's: ``NaN`` and ``Infinity`` are numbers) must give a mapping with
  ``objects`` and ``relationships``; every object needs a ``bbox`` of 4 ints or floats (``True`` counts as
  an int there) and a string ``id``; every relationship needs string ``subject``, ``predicate`` and
  ``object``. Anything else rejects the whole answer: R1-SGG stores its placeholder (one box labelled 0
  and a dummy relation), which its evaluator scores as an image with recall 0.
- Names are lower-cased with ``_``/``-`` as spaces; an object's category is its id before the first dot.
  Objects whose category is not in the vocabulary are dropped (R1-SGG first maps them through its synonym
  lists and WordNet; here :func:`~.labels.normalize_object` stands in, see ``docs/tasks/sgg.md``); no
  object left means the placeholder. A relationship is kept when both ends name kept objects (the first
  object of a repeated name) and its predicate is a vocabulary predicate after
  :func:`~.labels.normalize_predicate` (R1-SGG: its synonym lists, passive-to-active swaps and WordNet).
- Boxes are scaled from the model frame to pixels with floats, neither rounded nor clipped.

An answer with objects and an empty relationship list is *not* a placeholder: its objects count in box
AP, and R1-SGG's evaluator leaves the image out of every recall (it has no predicted relation).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from r1vision.tasks.sgg.boxes import BoxFrame
from r1vision.tasks.sgg.labels import normalize_object, normalize_predicate

MAX_CHARS = 200_000  # the parser's cap: longer model text is cut there first (linear scans only)


def refine(name: str) -> str:
    """R1-SGG's name clean-up: ``_`` and ``-`` to spaces, stripped, lower case."""
    return name.replace("_", " ").replace("-", " ").strip().lower()


def answer_content(text: str) -> str:
    """The part of ``text`` R1-SGG's ``extract_answer_content`` hands to ``json.loads`` (same result as
    its regular expressions, found with two linear ``find`` calls)."""
    text = text.replace("```", " ").replace("json", " ").strip()
    start = text.find("<answer>")
    if start < 0:
        return text
    end = text.find("</answer>", start + 8)
    return (text[start + 8 : end] if end >= 0 else text[start + 8 :]).strip()


def _is_box(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) == 4
        and all(isinstance(v, (int, float)) for v in value)
    )


def gather(
    text: str, frame: BoxFrame, objects: Sequence[str], predicates: Sequence[str]
) -> tuple[list[tuple[str, list[float]]], list[str], list[tuple[int, int, str]]] | None:
    """``(kept objects as (category, pixel box), their names, relations as (subject, object, predicate))``
    of one answer, or ``None`` where R1-SGG stores its placeholder."""
    try:
        resp = json.loads(answer_content(text[:MAX_CHARS]))
        raw_objects, raw_relations = resp["objects"], resp["relationships"]
        sx, sy = frame.orig_width / frame.width, frame.orig_height / frame.height
        parsed = []
        for obj in raw_objects:
            box = obj["bbox"]
            if len(box) != 4 or not _is_box(box) or "id" not in obj or not isinstance(obj["id"], str):
                return None
            parsed.append((refine(obj["id"]), [box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy]))
        relations = [
            (refine(r["subject"]), refine(r["predicate"]), refine(r["object"])) for r in raw_relations
        ]
    except Exception:  # noqa: BLE001 - R1-SGG's gatherer catches everything the same way
        return None
    vocab_objects = {normalize_object(o): o for o in objects}
    vocab_predicates = {normalize_predicate(p): p for p in predicates}
    kept: list[tuple[str, list[float]]] = []
    names: list[str] = []
    for name, box in parsed:
        category = vocab_objects.get(normalize_object(name.split(".")[0]))
        if category is not None:
            kept.append((category, box))
            names.append(name)
    if not kept:
        return None
    first = {}
    for i, name in enumerate(names):
        first.setdefault(name, i)
    out = []
    for subject, predicate, obj in relations:
        if subject in first and obj in first:
            predicate = vocab_predicates.get(normalize_predicate(predicate))
            if predicate is not None:
                out.append((first[subject], first[obj], predicate))
    return kept, names, out
