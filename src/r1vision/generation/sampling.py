"""Decoding settings for ``infer`` and the decoding evaluation: one explicit value for every parameter.

No torch here: the command line checks the values before any heavy import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SamplingOptions:
    """Decoding settings; ``temperature <= 0`` means greedy. ``top_k`` 0 and ``top_p`` 1.0 filter nothing,
    ``repetition_penalty`` 1.0 penalises nothing (the defaults: plain sampling, or plain greedy)."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    num_samples: int = 1
    seed: int = 0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        problems = []
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be >= 0 (0: off), got {self.top_k}")
        if not 0.0 <= self.min_p < 1.0:
            problems.append(f"min_p must be in [0, 1), got {self.min_p}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.num_samples < 1:
            problems.append(f"num_samples must be >= 1, got {self.num_samples}")
        elif self.num_samples > 1 and self.temperature <= 0:
            problems.append(
                f"num_samples {self.num_samples} needs temperature > 0 (greedy samples are identical)"
            )
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def record(self) -> dict[str, Any]:
        """What a prediction folder records about how it was decoded."""
        return dict(self.__dict__, greedy=self.greedy)
