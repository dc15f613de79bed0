"""The one "did you mean" rule of every refusal of a mistyped name (flags, recipe keys, tasks, rewards).

Stdlib only: the command-line pre-check uses it before any heavy import.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

# difflib's own default; the flag pre-check asks for a closer match (many flags share long prefixes).
DEFAULT_CUTOFF = 0.6


def closest(name: str, choices: Iterable[str], cutoff: float = DEFAULT_CUTOFF) -> str | None:
    """The valid name closest to ``name`` (``difflib`` ratio at least ``cutoff``), or ``None``; of names
    equally close, the one sharing the longest prefix (a typo keeps the start: ``sgh`` means ``sgg``, not
    ``svg``).

    >>> closest("learnig_rate", ["learning_rate", "lr_scheduler_type"])
    'learning_rate'
    >>> closest("sgh", ["svg", "sgg"])
    'sgg'
    >>> closest("xyz", ["learning_rate"]) is None
    True
    """
    pool = sorted(set(choices))
    close = difflib.get_close_matches(name, pool, n=max(len(pool), 1), cutoff=cutoff)

    def rank(choice: str) -> tuple[float, int]:
        return difflib.SequenceMatcher(None, choice, name).ratio(), len(os.path.commonprefix([choice, name]))

    return max(close, key=rank) if close else None
