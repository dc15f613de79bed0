"""F1 scores of a predicted scene graph, and the rewards built on them (``node_f1``, ``edge_f1``).

Recall-style rewards (``node``, ``edge``) pay for listing more: a model that emits every possible pair
loses nothing. F1 charges for wrong extras, so the best answer is exactly the ground truth:

- objects: one-to-one matching (Hungarian) of predicted to GT objects; a pair is a true positive when
  the normalised labels agree and the boxes overlap with IoU >= ``iou_threshold`` (model frame);
  ``object_f1 = 2 TP / (#pred + #gt)``;
- relations: a predicted triplet (deduplicated) is a true positive when its subject and object are
  true-positive objects whose GT counterparts carry the same (normalised) predicate in the GT graph;
  ``relation_f1`` likewise. Two empty sets score 1.
- ``exact``: both F1s are 1 (same objects, boxes within the threshold, same relations).

An unparsable answer scores 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from r1vision.tasks.base import RewardFunc, RewardSpec
from r1vision.tasks.common import column as _column
from r1vision.tasks.common import completion_text
from r1vision.tasks.common import named as _named
from r1vision.tasks.sgg.rewards import format_reward
from r1vision.tasks.sgg.scorer import SGGScorer
from r1vision.tasks.sgg.scores import GraphF1
from r1vision.vision.budget import PixelBudget

__all__ = ["F1_WEIGHTS", "GraphF1", "f1_rewards"]


def _f1_reward(scorer: SGGScorer, field: str) -> RewardFunc:
    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        objs, rels = _column(kwargs, "objects", n), _column(kwargs, "relationships", n)
        orig, sizes = _column(kwargs, "original_image_sizes", n), _column(kwargs, "image_sizes", n)
        out = []
        for i, c in enumerate(completions):
            try:
                out.append(
                    float(getattr(scorer.f1(completion_text(c), objs[i], rels[i], orig[i], sizes[i]), field))
                )
            except Exception:  # odd columns must not stop training; the row scores 0
                out.append(0.0)
        return out

    return _named(reward, field.replace("object_f1", "node_f1").replace("relation_f1", "edge_f1"))


F1_WEIGHTS = {"format": 1.0, "node_f1": 1.0, "edge_f1": 1.0}


def f1_rewards(
    model_family: str,
    *,
    weights: dict[str, float] | None = None,
    strict_format: bool = True,
    iou_threshold: float = 0.5,
    budget: PixelBudget | None = None,
    require_think: bool = False,
) -> list[RewardSpec]:
    """``format``, ``node_f1`` and ``edge_f1`` rewards, each in [0, 1] (``r1vision grpo --task_options
    '{"reward_set": "f1"}'`` from the command line).

    ``strict_format=False`` uses the lenient format score (0.25 per check, see :func:`format_score`):
    with the strict one, a single relation naming an unlisted object zeroes the whole format reward, so
    under RL dropping relations can pay more than attempting them (demo, GRPO on 3-object prompts:
    relations per answer 0.86 -> 0.57 strict, 0.68 lenient). The F1 rewards judge content; lenient
    format charges such a dropped relation 0.25 instead of 1.
    """
    w = dict(F1_WEIGHTS)
    unknown = set(weights or {}) - set(w)
    if unknown:
        raise ValueError(f"unknown F1 reward(s) {sorted(unknown)}; known: {sorted(w)}")
    w.update(weights or {})
    scorer = SGGScorer(model_family, iou_threshold=iou_threshold, budget=budget)
    funcs = {
        "format": format_reward(strict_format, require_think, scorer=scorer),
        "node_f1": _f1_reward(scorer, "object_f1"),
        "edge_f1": _f1_reward(scorer, "relation_f1"),
    }
    return [RewardSpec(name, func, w[name]) for name, func in funcs.items()]
