"""``r1vision_run.json``: the settings a model was trained with, saved next to its weights.

``r1vision infer`` reads it when ``--model`` is an r1vision output, so inference uses the task, task
options (prompt variant, closed vocabulary, ``<think>``), pixel budget and completion length of training.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RUN_FILE = "r1vision_run.json"


# The video budget's options (``--video_*``): saved with the run, so ``infer`` samples frames as training did.
VIDEO_KEYS = (
    "video_fps",
    "video_min_frames",
    "video_max_frames",
    "video_max_frame_pixels",
    "video_total_pixels",
)


def _absolute_if_local(path: str) -> str:
    return str(Path(path).resolve()) if path and Path(path).exists() else path


def run_settings(
    kind: str,
    script: Any,
    config: Any,
    task_options: dict[str, Any],
    reward_weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """What a later ``infer``/``eval``/``grpo`` needs to reproduce the training setup: the task and the
    options given (a recipe's merged with the command line's), the rewards as resolved (name -> weight, in
    order), the data, the pixel budget and the lengths."""
    settings: dict[str, Any] = {
        "kind": kind,
        "task": script.task,
        "task_options": task_options,
        "reward_funcs": list(reward_weights or {}) or None,
        "reward_weights": dict(reward_weights or {}) or None,
        "base_model": _absolute_if_local(script.model),
        "dataset": _absolute_if_local(script.dataset),
        "dataset_split": script.dataset_split,
        "min_pixels": config.min_pixels,
        "max_pixels": config.max_pixels,
        "lora_r": config.lora_r,
    }
    for key in (
        *VIDEO_KEYS,
        "max_completion_length",
        "max_length",
        "temperature",
        "top_p",
        "num_generations",
    ):
        if hasattr(config, key):
            settings[key] = getattr(config, key)
    return settings


def write_run_info(output_dir: str | os.PathLike, settings: dict[str, Any]) -> Path:
    """Write ``settings`` to ``<output_dir>/r1vision_run.json``."""
    path = Path(output_dir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(
        path.name + ".tmp"
    )  # atomic: a kill mid-write leaves the old record, not half of one
    tmp.write_text(json.dumps(settings, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)
    return path


def read_run_info(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The saved settings of an r1vision output folder; ``{}`` for any other model (Hub id, stock folder)."""
    path = Path(model_dir) / RUN_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
