"""Exponential moving average of the trained (LoRA) weights, swapped in for evaluation and export.

Flow-GRPO's EMA (decay warm-up ``min((1 + n) / (10 + n), decay)``) with one fix: the raw weights are
stored with ``.to("cpu", copy=True)`` before the EMA is copied in. Flow-GRPO's ``.cpu()`` returns the same
tensor on a CPU, so there "restoring" the raw weights restored the EMA values instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch


class EMA:
    """EMA of ``params``, updated every ``update_interval`` calls of :meth:`step`."""

    def __init__(
        self, params: Iterable[torch.nn.Parameter], decay: float = 0.9, update_interval: int = 8
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.shadow = [p.detach().float().clone() for p in self.params]
        self.decay, self.update_interval = decay, max(1, update_interval)
        self.calls = self.updates = 0

    @torch.no_grad()
    def step(self) -> bool:
        """Count one optimizer step; on every ``update_interval``-th, move the average. Returns whether it did."""
        self.calls += 1
        if self.calls % self.update_interval:
            return False
        decay = min((1 + self.updates) / (10 + self.updates), self.decay)
        for shadow, p in zip(self.shadow, self.params, strict=True):
            shadow.mul_(decay).add_(p.detach().float(), alpha=1 - decay)
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
        return {"shadow": [s.cpu() for s in self.shadow], "calls": self.calls, "updates": self.updates,
                "decay": self.decay, "update_interval": self.update_interval}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        if len(state["shadow"]) != len(self.shadow):
            raise ValueError(f"EMA state has {len(state['shadow'])} tensors, the model {len(self.shadow)}")
        self.shadow = [s.float().clone() for s in state["shadow"]]
        self.calls, self.updates = int(state["calls"]), int(state["updates"])
