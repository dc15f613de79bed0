"""``MotionTask``: loading, prompts, SFT targets and rewards of the ``motion`` (video) task."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r1vision.tasks.base import RewardSpec, RunContext, Task
from r1vision.tasks.motion.data import load_motion_dataset
from r1vision.tasks.motion.prompts import answer_text
from r1vision.tasks.motion.rewards import motion_accuracy, motion_format
from r1vision.tasks.options import NoOptions


class MotionTask(Task):
    """Which way does the shape move? Video rows in Video-R1's schema; the answer is an option letter."""

    name = "motion"
    description = "which way the shape moves in a short video (built-in video task)"
    Options = NoOptions
    max_new_tokens = 16
    synthesizer = "r1vision.tasks.motion.synth:synth_motion"
    videos = True

    def load(self, source: str | Path, split: str, opts: NoOptions, run: RunContext):
        return load_motion_dataset(source, split)

    def sft_target(self, row: Mapping[str, Any], opts: NoOptions, run: RunContext) -> str:
        return answer_text(row["answer"])

    def rewards(self, opts: NoOptions, run: RunContext) -> list[RewardSpec]:
        return [
            RewardSpec("accuracy", motion_accuracy, weight=1.0),
            RewardSpec("format", motion_format, weight=0.5),
        ]
