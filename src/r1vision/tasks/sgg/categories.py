"""Category vocabularies (VG150, PSG, synthetic) and VG150's zero-shot triplets, shipped as package data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

# The vocabulary of `r1vision synth sgg` scenes (kept here so prompts and eval need no synthetic import).
SYNTH_SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "hexagon")
SYNTH_COLORS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
SYNTH_PREDICATES: tuple[str, ...] = ("left of", "above", "inside", "on", "near", "bigger than")


@dataclass(frozen=True)
class Vocabulary:
    """Object and predicate category names of one benchmark, in the benchmark's index order."""

    name: str
    objects: tuple[str, ...]
    predicates: tuple[str, ...]


def _read_json(filename: str) -> dict:
    text = resources.files("r1vision.tasks.sgg").joinpath("data", filename).read_text(encoding="utf-8")
    return json.loads(text)


@cache
def load_vocabulary(name: str = "vg150") -> Vocabulary:
    """Vocabulary ``"vg150"``, ``"psg"``, ``"synth"``, or a JSON file with ``objects`` and ``predicates`` lists."""
    key = str(name).lower()
    if key in ("vg150", "vg"):
        data = _read_json("vg150_categories.json")
        return Vocabulary("vg150", tuple(data["objects"]), tuple(data["predicates"]))
    if key == "psg":
        data = _read_json("psg_categories.json")
        return Vocabulary("psg", tuple(data["objects"]), tuple(data["predicates"]))
    if key in ("synth", "synthetic"):
        objects = tuple(f"{c} {s}" for c in SYNTH_COLORS for s in SYNTH_SHAPES) + SYNTH_SHAPES
        return Vocabulary("synth", objects, SYNTH_PREDICATES)
    path = Path(name)
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data.get("objects"), list) or not isinstance(data.get("predicates"), list):
            raise ValueError(f"vocabulary file {path} needs 'objects' and 'predicates' lists")
        return Vocabulary(data.get("benchmark", path.stem), tuple(data["objects"]), tuple(data["predicates"]))
    raise ValueError(f"unknown vocabulary {name!r}: use 'vg150', 'psg', 'synth' or a JSON file path")


@cache
def zero_shot_triplets(name: str = "vg150") -> frozenset[tuple[str, str, str]]:
    """(subject, predicate, object) category triplets never seen in training (VG150 only; others: empty)."""
    if str(name).lower() not in ("vg150", "vg"):
        return frozenset()
    data = _read_json("vg150_zeroshot_triplets.json")
    return frozenset((s, p, o) for s, p, o in data["triplets"])
