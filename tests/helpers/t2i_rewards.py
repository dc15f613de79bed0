"""Image rewards for the multi-process text-to-image tests, named by dotted path on a launched command line
(``--reward_funcs tests.helpers.t2i_rewards.flat_on_rank1``; the launch runs in the repository root).

``flat_on_rank1``: the mean brightness of each image (distinct per image: every group has spread), except on
the process of rank 1, which returns one constant for every image (all its groups flat: no learning signal)
on every call, or on every other call with ``R1V_FLAT=alternate`` (never with ``R1V_FLAT=never``).
"""

from __future__ import annotations

import os
from typing import Any

_calls = {"n": 0}


def flat_on_rank1(prompts: list[str], images: list[Any], **columns: Any) -> list[float]:
    import numpy as np

    _calls["n"] += 1
    mode = os.environ.get("R1V_FLAT", "always")
    flat = os.environ.get("RANK") == "1" and (
        mode == "always" or (mode == "alternate" and _calls["n"] % 2 == 1)
    )
    if flat:
        return [0.5] * len(images)
    return [float(np.asarray(image, dtype=np.float64).mean() / 255.0) for image in images]
