"""Exponential moving average of the trained (LoRA) weights, swapped in for evaluation and export.

Flow-GRPO's schedule (``flow_grpo/ema.py`` as ``scripts/train_sd3.py`` calls it): :meth:`EMA.step` runs after
every micro-batch with the number of optimizer steps taken so far, ``s``, and moves the average when
``(s + 1) % update_interval == 0`` with decay ``min((1 + s) / (10 + s), decay)``. With gradient
accumulation the average therefore moves once per micro-batch of every ``update_interval``-th update.

One fix: the raw weights are stored with ``.to("cpu", copy=True)`` before the EMA is copied in. Flow-GRPO's
``.cpu()`` returns the same tensor on a CPU, so there "restoring" the raw weights restored the EMA values.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch


class EMA:
    """EMA of the trainable ``params`` (see the module docstring for the schedule)."""

    def __init__(
        self, params: Iterable[torch.nn.Parameter], decay: float = 0.9, update_interval: int = 8
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.shadow = [p.detach().float().clone() for p in self.params]
        self.decay, self.update_interval = decay, max(1, update_interval)
        self.updates = 0

    @torch.no_grad()
    def step(self, optimization_step: int) -> bool:
        """After a micro-batch, with ``optimization_step`` optimizer steps taken; returns whether it moved."""
        if (optimization_step + 1) % self.update_interval:
            return False
        decay = min((1 + optimization_step) / (10 + optimization_step), self.decay)
        for shadow, p in zip(self.shadow, self.params, strict=True):
            shadow.add_(p.detach().float().to(shadow.device) - shadow, alpha=1 - decay)
        self.updates += 1
        return True

    @contextmanager
    def swapped(self) -> Iterator[None]:
        """Inside the block the parameters hold the EMA values; the raw ones come back after (real copies)."""
        raw = [p.detach().to("cpu", copy=True) for p in self.params]
        with torch.no_grad():
            for shadow, p in zip(self.shadow, self.params, strict=True):
                p.copy_(shadow.to(p.device, p.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for saved, p in zip(raw, self.params, strict=True):
                    p.copy_(saved.to(p.device))

    def state_dict(self) -> dict:
        return {
            "shadow": [s.cpu() for s in self.shadow],
            "updates": self.updates,
            "decay": self.decay,
            "update_interval": self.update_interval,
        }

    def load_state_dict(self, state: dict) -> None:
        if len(state["shadow"]) != len(self.shadow):
            raise ValueError(f"EMA state has {len(state['shadow'])} tensors, the model {len(self.shadow)}")
        self.shadow = [s.float().clone() for s in state["shadow"]]
        self.updates = int(state.get("updates", 0))
