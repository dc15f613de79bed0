"""Label similarity for objects and predicates: exact match after normalisation, nothing to download.

Normalisation lowercases, turns ``_``/``-`` into spaces, strips an id suffix (``"man.1"``), maps a small
synonym table onto VG150/PSG names and singularises plurals. :class:`LabelSimilarity` scores 1.0 for equal
normalised labels, ``head_credit`` when only the head noun (last word) agrees (``"red circle"`` vs
``"circle"``), else 0. Users with an embedding model plug it in with :class:`EmbeddingSimilarity`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from r1vision.tasks.sgg.parse import name_of

# Non-benchmark words models like to use -> the benchmark's word. Deliberately small and conservative:
# VG150 keeps pairs such as man/guy, airplane/plane and wearing/wears apart, so those are not merged.
OBJECT_SYNONYMS: dict[str, str] = {
    "bicycle": "bike",
    "motorbike": "motorcycle",
    "automobile": "car",
    "t shirt": "shirt",
    "tshirt": "shirt",
    "jeans": "jean",
    "pants": "pant",
    "trousers": "pant",
    "shorts": "short",
    "cellphone": "phone",
    "cell phone": "phone",
    "mobile phone": "phone",
    "puppy": "dog",
    "kitten": "cat",
    "monitor": "screen",
    "mug": "cup",
    "sneakers": "sneaker",
    "stone": "rock",
    "bag pack": "bag",
    "backpack": "bag",
    "cabinets": "cabinet",
    "tennis racket": "racket",
    "racquet": "racket",
}
PREDICATE_SYNONYMS: dict[str, str] = {
    "on top of": "on",
    "upon": "on",
    "next to": "near",
    "beside": "near",
    "close to": "near",
    "by": "near",
    "inside": "in",
    "inside of": "in",
    "within": "in",
    "underneath": "under",
    "beneath": "under",
    "below": "under",
    "to the left of": "left of",
    "on the left of": "left of",
    "is left of": "left of",
    "is above": "above",
    "larger than": "bigger than",
    "is bigger than": "bigger than",
    "has a": "has",
    "have": "has",
}
# Words whose trailing "s" is not a plural.
_NOT_PLURAL = {
    "glass",
    "grass",
    "bus",
    "dress",
    "cross",
    "lens",
    "pants",
    "shorts",
    "jeans",
    "is",
    "has",
    "glasses",
}


def _singular(word: str) -> str:
    if len(word) <= 3 or word in _NOT_PLURAL or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "zes", "sses")):
        return word[:-2]
    if word.endswith("ves") and word not in {"gloves", "sleeves"}:
        return word[:-3] + "f"
    if word.endswith("s"):
        return word[:-1]
    return word


def _clean(text: str) -> str:
    return " ".join(str(text).replace("_", " ").replace("-", " ").lower().split())


@lru_cache(maxsize=65536)
def normalize_object(label: str) -> str:
    """Canonical object label: ``"Red_Circles.2"`` -> ``"red circle"``, ``"T-shirt"`` -> ``"shirt"``."""
    text = _clean(name_of(str(label)))
    if text in OBJECT_SYNONYMS:
        return OBJECT_SYNONYMS[text]
    words = text.split()
    if words:
        words[-1] = _singular(words[-1])
    text = " ".join(words)
    return OBJECT_SYNONYMS.get(text, text)


@lru_cache(maxsize=65536)
def normalize_predicate(label: str) -> str:
    """Canonical predicate: lowercased, ``_``/``-`` as spaces, common paraphrases mapped (``"next to"`` -> near)."""
    text = _clean(label)
    return PREDICATE_SYNONYMS.get(text, text)


Similarity = Callable[[str, str], float]


class LabelSimilarity:
    """Rule-based similarity in [0, 1]: 1 for equal normalised labels, ``head_credit`` for equal head nouns."""

    def __init__(self, head_credit: float = 0.5, predicate: bool = False) -> None:
        if not 0.0 <= head_credit <= 1.0:
            raise ValueError(f"head_credit must lie in [0, 1], got {head_credit}")
        self.head_credit = head_credit
        self._norm = normalize_predicate if predicate else normalize_object

    def __call__(self, a: str, b: str) -> float:
        na, nb = self._norm(a), self._norm(b)
        if na == nb:
            return 1.0
        if self.head_credit and na and nb and na.split()[-1] == nb.split()[-1]:
            return self.head_credit
        return 0.0


class EmbeddingSimilarity:
    """Cosine similarity of label embeddings, clipped to [0, 1]; equal normalised labels always score 1.

    ``embed`` maps a list of strings to an array (n x d) — e.g. a sentence-transformers model's
    ``encode``. Embeddings are cached per normalised label.
    """

    def __init__(
        self, embed: Callable[[list[str]], Sequence[Sequence[float]]], predicate: bool = False
    ) -> None:
        self.embed = embed
        self._norm = normalize_predicate if predicate else normalize_object
        self._cache: dict[str, np.ndarray] = {}

    def _vector(self, label: str) -> np.ndarray:
        if label not in self._cache:
            vec = np.asarray(self.embed([label]), dtype=np.float64).reshape(-1)
            norm = np.linalg.norm(vec)
            self._cache[label] = vec / norm if norm > 0 else vec
        return self._cache[label]

    def __call__(self, a: str, b: str) -> float:
        na, nb = self._norm(a), self._norm(b)
        if na == nb:
            return 1.0
        try:
            value = float(np.dot(self._vector(na), self._vector(nb)))
        except Exception:  # a user's embedder failing on odd text must not crash training
            return 0.0
        return min(max(value, 0.0), 1.0) if np.isfinite(value) else 0.0


def similarity_matrix(preds: Sequence[str], gts: Sequence[str], sim: Similarity) -> np.ndarray:
    """Matrix (len(preds) x len(gts)) of similarities, computing each distinct label pair once."""
    out = np.zeros((len(preds), len(gts)), dtype=np.float64)
    cache: dict[tuple[str, str], float] = {}
    for i, p in enumerate(preds):
        for j, g in enumerate(gts):
            key = (p, g)
            if key not in cache:
                cache[key] = sim(p, g)
            out[i, j] = cache[key]
    return out
