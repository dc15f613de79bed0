"""Scene-graph rewards in TRL's convention ``f(prompts, completions, **columns) -> list[float]``.

All rewards lie in [0, 1] (group normalisation, when enabled, changes that; see :func:`with_group_norm`):

- ``format``: strict = 1 only for ``[<think>..</think>] <answer>{valid non-empty graph}</answer>`` with
  nothing else; lenient = 0.25 each for answer tags, decodable JSON, at least one object, no dropped
  object/relation.
- ``node``: Hungarian matching of predicted to GT objects (cost ``w_label(1-sim) + w_giou(1-GIoU) +
  w_l1·L1`` on [0, 1]-normalised model-frame boxes); mean label similarity over GT objects.
- ``box``: mean over GT objects of ``(IoU + exp(-L1)) / 2`` through the same matching.
- ``edge``: soft recall; a GT relation scores ``sim(predicate) · q(subject) · q(object)`` for the best
  predicted relation between the matched objects, ``q = label_sim · (IoU + exp(-L1)) / 2``.
- ``edge_hard``: share of GT relations for which some predicted relation has the same predicate and
  categories (after normalisation) with both IoUs >= 0.5; predicted copies of one object share its credit
  (:func:`~r1vision.tasks.sgg.ground_truth.copy_shares`).

Ground truth is converted to the model frame with :meth:`BoxFrame.to_model` — the function that writes
SFT targets — using the ``image_sizes`` / ``original_image_sizes`` columns the trainer adds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from r1vision.tasks.base import RewardFunc, RewardSpec
from r1vision.tasks.common import column as _column
from r1vision.tasks.common import completion_text
from r1vision.tasks.common import named as _named
from r1vision.tasks.common import unit as _unit
from r1vision.tasks.group_filter import select_groups_by_std
from r1vision.tasks.sgg.parse import ParseResult, find_block, parse_scene_graph
from r1vision.tasks.sgg.scorer import SGGScorer
from r1vision.tasks.sgg.scores import GraphScores

__all__ = ["GraphScores", "SGGScorer", "make_rewards", "select_groups_by_std"]

# Issues meaning some emitted object or relation was dropped (as opposed to packaging problems).
_CONTENT_ISSUES = {
    "invalid_object",
    "invalid_box",
    "non_numeric_box",
    "inverted_box",
    "non_finite_box",
    "duplicate_id",
    "invalid_relation",
    "unknown_id",
    "truncated_json",
    "too_many_objects",
    "too_many_relations",
}
# A ```json fence filling the answer is R1-SGG's shape (its prompts and checkpoints write it): not a flaw.
_STRICT_OK_ISSUES = {"fenced"}


def _strict_shape(text: str) -> tuple[bool, bool]:
    """(``[<think>..</think>] <answer>..</answer>`` with only whitespace around, a think block leads)."""
    body = text.strip()
    think = False
    if body.startswith("<think>"):
        block = find_block(body, "<think>", "</think>")
        if block is None:
            return False, False
        body, think = body[block[1] :].lstrip(), True
    if not body.startswith("<answer>"):
        return False, think
    block = find_block(body, "<answer>", "</answer>")
    return block is not None and block[1] == len(body), think


def format_score(text: str, parsed: ParseResult, strict: bool = True, require_think: bool = False) -> float:
    """Format reward of one completion (see module docstring)."""
    if strict:
        if not parsed.ok or set(parsed.issues) - _STRICT_OK_ISSUES or not parsed.graph.objects:
            return 0.0
        shaped, think = _strict_shape(text)
        if not shaped or (require_think and not think):
            return 0.0
        return 1.0
    score = 0.25 * parsed.tagged
    if parsed.ok:
        score += 0.25
        score += 0.25 * bool(parsed.graph.objects)
        score += 0.25 * (not (set(parsed.issues) & _CONTENT_ISSUES))
    if require_think and not parsed.has_think:
        score *= 0.5
    return float(score)


def format_reward(
    strict: bool = True, require_think: bool = False, name: str = "format", scorer: SGGScorer | None = None
) -> RewardFunc:
    """Format reward function (strict or lenient), in [0, 1]; ``scorer`` shares its parse cache."""
    parse = scorer.parse if scorer is not None else parse_scene_graph

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            out.append(_unit(format_score(text, parse(text), strict, require_think)))
        return out

    return _named(reward, name)


def graph_reward(scorer: SGGScorer, field: str, name: str | None = None) -> RewardFunc:
    """Reward function returning ``field`` (``node``, ``box``, ``edge``, ``edge_hard``) of ``scorer``'s scores."""

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        objs, rels = _column(kwargs, "objects", n), _column(kwargs, "relationships", n)
        orig, sizes = _column(kwargs, "original_image_sizes", n), _column(kwargs, "image_sizes", n)
        scores = scorer.score_many([completion_text(c) for c in completions], objs, rels, orig, sizes)
        return [getattr(s, field) for s in scores]

    return _named(reward, name or field)


# ---------------------------------------------------------------------------------------------------------
# Group normalisation, warm-up and group filtering.


def group_normalize(values: Sequence[float], group_size: int, eps: float = 1e-4) -> list[float]:
    """Z-score ``values`` within consecutive groups of ``group_size`` (R1-SGG's ``split_rewards``)."""
    arr = np.asarray(values, dtype=np.float64)
    out = np.zeros_like(arr)
    for start in range(0, len(arr), max(int(group_size), 1)):
        g = arr[start : start + group_size]
        out[start : start + group_size] = (g - g.mean()) / (g.std() + eps)
    return out.tolist()


def with_group_norm(func: RewardFunc, group_size: int) -> RewardFunc:
    """Normalise a reward within groups of ``group_size`` consecutive completions (one prompt's samples).

    Only valid when each call sees whole groups (TRL keeps a prompt's generations contiguous; make the
    per-device batch a multiple of ``num_generations``). Output range: about ``±sqrt(group_size - 1)``.
    """

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return group_normalize(func(prompts, completions, **kwargs), group_size)

    return _named(reward, func.__name__)


def warmup_factor(trainer_state: Any, warmup_steps: int) -> float:
    """``min(1, global_step / warmup_steps)``; 1 when no warm-up or no trainer state."""
    if warmup_steps <= 0 or trainer_state is None:
        return 1.0
    step = (
        trainer_state.get("global_step")
        if isinstance(trainer_state, dict)
        else getattr(trainer_state, "global_step", None)
    )
    if step is None:
        return 1.0
    return min(1.0, max(0.0, float(step) / float(warmup_steps)))


def with_warmup(func: RewardFunc, warmup_steps: int) -> RewardFunc:
    """Scale a reward linearly from 0 to 1 over the first ``warmup_steps`` optimiser steps."""

    def reward(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        factor = warmup_factor(kwargs.get("trainer_state"), warmup_steps)
        return [factor * v for v in func(prompts, completions, **kwargs)]

    return _named(reward, func.__name__)


DEFAULT_WEIGHTS = {"format": 1.0, "node": 1.0, "box": 1.0, "edge": 1.0, "edge_hard": 0.0}

# Named reward settings. "r1sgg" is R1-SGG's (open_r1/grpo.py): reward weights format 1, node 2, box 2,
# edge 5 (FORMAT/NODE/NODE/EDGE_REWARD_WEIGHT); matching cost 1·(1 - label sim) + 2·(1 - GIoU) + 5·L1
# (SEM/IOU/BOX_L1_WEIGHT); box term (2·IoU + 5·exp(-L1)) / 7. What stays r1vision's own: label similarity
# is rule-based (R1-SGG uses spaCy word vectors), the edge reward is the soft recall defined above, and the
# strict format reward does not require <think> (pass require_think=True for R1-SGG's pattern).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "r1sgg": {
        "weights": {"format": 1.0, "node": 2.0, "box": 2.0, "edge": 5.0, "edge_hard": 0.0},
        "w_label": 1.0,
        "w_giou": 2.0,
        "w_l1": 5.0,
        "box_iou_weight": 2.0,
        "box_l1_weight": 5.0,
    },
}


def preset_options(preset: str | None, **overrides: Any) -> dict[str, Any]:
    """The options of a named preset with ``overrides`` (not None) applied on top."""
    name = preset or "default"
    if name not in PRESETS:
        raise ValueError(f"unknown SGG reward preset {name!r}; known: {sorted(PRESETS)}")
    opts = {k: dict(v) if isinstance(v, dict) else v for k, v in PRESETS[name].items()}
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "weights":
            opts["weights"] = {**opts.get("weights", {}), **value}
        else:
            opts[key] = value
    return opts


def make_rewards(
    model_family: str,
    *,
    weights: dict[str, float] | None = None,
    strict_format: bool = True,
    require_think: bool = False,
    group_size: int | None = None,
    warmup_steps: int = 0,
    warmup_rewards: Sequence[str] = ("node", "box", "edge", "edge_hard"),
    preset: str | None = None,
    **scorer_kwargs: Any,
) -> list[RewardSpec]:
    """The SGG reward set for ``model_family``; ``scorer_kwargs`` go to :class:`SGGScorer`.

    ``preset`` (a key of :data:`PRESETS`, e.g. ``"r1sgg"``) supplies weights and matching options;
    explicit arguments override it. ``group_size`` enables per-reward group normalisation;
    ``warmup_steps`` ramps ``warmup_rewards``.
    """
    opts = preset_options(preset, weights=weights, **scorer_kwargs)
    weights = opts.pop("weights", None)
    w = dict(DEFAULT_WEIGHTS)
    unknown = set(weights or {}) - set(w)
    if unknown:
        raise ValueError(f"unknown SGG reward(s) {sorted(unknown)}; known: {sorted(w)}")
    w.update(weights or {})
    scorer = SGGScorer(model_family, **opts)
    funcs: dict[str, RewardFunc] = {"format": format_reward(strict_format, require_think, scorer=scorer)}
    for field in ("node", "box", "edge", "edge_hard"):
        funcs[field] = graph_reward(scorer, field)
    specs = []
    for name, func in funcs.items():
        low, high = 0.0, 1.0
        if warmup_steps and name in warmup_rewards:
            func = with_warmup(func, warmup_steps)
        if group_size:
            func = with_group_norm(func, group_size)
            low, high = -math.sqrt(max(group_size - 1, 1)), math.sqrt(max(group_size - 1, 1))
        specs.append(RewardSpec(name, func, w[name], low, high))
    return specs
