"""The one "did you mean" rule of every refusal of a mistyped name (flags, recipe keys, tasks, rewards).

Stdlib only: the command-line pre-check uses it before any heavy import.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's own default; the flag pre-check asks for a closer match (many flags share long prefixes).
DEFAULT_CUTOFF = 0.6


def closest(name: str, choices: Iterable[str], cutoff: float = DEFAULT_CUTOFF) -> str | None:
    """The valid name closest to ``name`` (``difflib`` ratio at least ``cutoff``), or ``None``.

    >>> closest("learnig_rate", ["learning_rate", "lr_scheduler_type"])
    'learning_rate'
    >>> closest("xyz", ["learning_rate"]) is None
    True
    """
    close = difflib.get_close_matches(name, sorted(set(choices)), n=1, cutoff=cutoff)
    return close[0] if close else None
