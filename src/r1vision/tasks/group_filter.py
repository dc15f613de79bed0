"""Group filtering by reward std (R1-SGG style): the one definition the trainer and the SGG task share.

Kept free of torch so that task modules can import it cheaply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def groups_to_keep(n_groups: int, keep: int | float) -> int:
    """How many groups ``keep`` asks for: a float is a fraction in (0, 1] rounded *up* (never 0 groups),
    an int a count (clipped to ``n_groups``)."""
    if isinstance(keep, bool) or not isinstance(keep, (int, float)):
        raise TypeError(f"keep must be an int (a count) or a float (a fraction), got {keep!r}")
    if isinstance(keep, float):
        if not 0.0 < keep <= 1.0:
            raise ValueError(f"a fraction of groups must be in (0, 1], got {keep}")
        return min(n_groups, max(1, math.ceil(keep * n_groups - 1e-9)))
    return max(0, min(int(keep), n_groups))


def select_groups_by_std(rewards: Sequence[float], group_size: int, keep: int | float) -> list[int]:
    """Indices of the completions in the ``keep`` groups (count, or fraction) of highest reward std.

    Consecutive ``group_size`` rewards form a group. NaN rewards (unscorable completions) are left out of
    their group's std; a group with fewer than two scorable rewards has std 0. Ties keep the earlier group.
    """
    arr = np.asarray(rewards, dtype=np.float64)
    if group_size <= 0 or len(arr) % group_size:
        raise ValueError(f"{len(arr)} rewards do not split into groups of {group_size}")
    grouped = arr.reshape(-1, group_size)
    valid = ~np.isnan(grouped)
    count = valid.sum(axis=1)
    filled = np.where(valid, grouped, 0.0)
    mean = filled.sum(axis=1) / np.maximum(count, 1)
    stds = np.sqrt((np.where(valid, grouped - mean[:, None], 0.0) ** 2).sum(axis=1) / np.maximum(count, 1))
    n_keep = groups_to_keep(len(stds), keep)
    order = np.argsort(-stds, kind="stable")[:n_keep]
    return [int(g * group_size + k) for g in sorted(order.tolist()) for k in range(group_size)]
