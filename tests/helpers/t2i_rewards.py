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


def signal_self(prompts: list[str], images: list[Any], **columns: Any) -> list[float]:
    """Mean brightness; on its ``R1V_SIGNAL_AT``-th call, in the process of rank ``R1V_SIGNAL_RANK`` (any
    rank when unset), the process sends itself SIGUSR1: a preemption arriving in the middle of a step."""
    import signal

    import numpy as np

    _calls["signal"] = _calls.get("signal", 0) + 1
    rank = os.environ.get("R1V_SIGNAL_RANK")
    if _calls["signal"] == int(os.environ.get("R1V_SIGNAL_AT", "0")) and rank in (
        None,
        os.environ.get("RANK", "0"),
    ):
        os.kill(os.getpid(), signal.SIGUSR1)
    return [float(np.asarray(image, dtype=np.float64).mean() / 255.0) for image in images]
