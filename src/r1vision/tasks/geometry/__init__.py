"""Geometry maths task: MAYE-style data, answer verification, rewards and evaluation metrics.

Public entry point for answer checking: :func:`answers_match` (``prediction`` and ``solution`` as a model
and a dataset write them). The task class is imported lazily so that ``answers_match`` does not pull in
``datasets``.
"""

from __future__ import annotations

from typing import Any

from r1vision.tasks.geometry.extract import extract_final_answer, parse_choices
from r1vision.tasks.geometry.metrics import (
    DECODINGS,
    REFLECTION_WORDS,
    generation_step_metrics,
    length_metrics,
    pass_at_k,
    pass_at_k_unbiased,
    reflection_metrics,
)
from r1vision.tasks.geometry.rewards import make_rewards
from r1vision.tasks.geometry.verify import answers_match, answers_match_batch, explain_match

__all__ = [
    "DECODINGS",
    "REFLECTION_WORDS",
    "GeometryTask",
    "answers_match",
    "answers_match_batch",
    "make_rewards",
    "explain_match",
    "extract_final_answer",
    "generation_step_metrics",
    "length_metrics",
    "load_geometry_dataset",
    "parse_choices",
    "pass_at_k",
    "pass_at_k_unbiased",
    "reflection_metrics",
]


def __getattr__(name: str) -> Any:
    if name == "GeometryTask":
        from r1vision.tasks.geometry.task import GeometryTask

        return GeometryTask
    if name == "load_geometry_dataset":
        from r1vision.tasks.geometry.data import load_geometry_dataset

        return load_geometry_dataset
    raise AttributeError(f"module 'r1vision.tasks.geometry' has no attribute {name!r}")
