"""The scores of one completion: the soft graph scores (the ``graph`` reward set) and F1 with its counts
(the ``f1`` set). A leaf module: the per-row scorer and the batched path both build them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GraphScores:
    """Soft scores of one completion (see :mod:`rewards`)."""

    node: float = 0.0
    box: float = 0.0
    edge: float = 0.0
    edge_hard: float = 0.0


@dataclass(frozen=True)
class GraphF1:
    """F1 scores of one prediction and the counts behind them (see :mod:`f1`)."""

    object_f1: float = 0.0
    relation_f1: float = 0.0
    object_tp: int = 0
    relation_tp: int = 0
    num_pred_objects: int = 0
    num_pred_relations: int = 0

    @property
    def exact(self) -> bool:
        return self.object_f1 == 1.0 and self.relation_f1 == 1.0
