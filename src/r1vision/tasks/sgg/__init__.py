"""Scene-graph generation: VG150/PSG/synthetic data, prompts, parser, rewards and VG150 evaluation."""

from r1vision.tasks.sgg.boxes import BoxFrame, box_frame, giou, iou
from r1vision.tasks.sgg.categories import Vocabulary, load_vocabulary, zero_shot_triplets
from r1vision.tasks.sgg.data import load_raw, sft_target, to_trainer_format, validate_row, validate_rows
from r1vision.tasks.sgg.evaluate import evaluate_sgg, format_table
from r1vision.tasks.sgg.labels import (
    EmbeddingSimilarity,
    LabelSimilarity,
    normalize_object,
    normalize_predicate,
)
from r1vision.tasks.sgg.parse import ParseResult, SceneGraph, parse_scene_graph
from r1vision.tasks.sgg.prediction_files import read_predictions
from r1vision.tasks.sgg.prompts import build_messages, build_prompt, format_answer
from r1vision.tasks.sgg.task import PSGTask, SGGTask

# The rewards import scipy (~0.5 s): loaded on first use, so that evaluation starts without them.
_REWARDS = frozenset(
    {
        "SGGScorer",
        "format_reward",
        "graph_reward",
        "group_normalize",
        "make_rewards",
        "select_groups_by_std",
        "with_group_norm",
        "with_warmup",
    }
)


def __getattr__(name: str) -> object:
    if name in _REWARDS:
        from r1vision.tasks.sgg import rewards

        return getattr(rewards, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BoxFrame",
    "EmbeddingSimilarity",
    "LabelSimilarity",
    "PSGTask",
    "ParseResult",
    "SGGScorer",
    "SGGTask",
    "SceneGraph",
    "Vocabulary",
    "box_frame",
    "build_messages",
    "build_prompt",
    "evaluate_sgg",
    "format_answer",
    "format_reward",
    "format_table",
    "giou",
    "graph_reward",
    "group_normalize",
    "iou",
    "load_raw",
    "load_vocabulary",
    "make_rewards",
    "normalize_object",
    "normalize_predicate",
    "parse_scene_graph",
    "read_predictions",
    "select_groups_by_std",
    "sft_target",
    "to_trainer_format",
    "validate_row",
    "validate_rows",
    "with_group_norm",
    "with_warmup",
    "zero_shot_triplets",
]
