"""``ColorTask``: loading, prompts, SFT targets and rewards of the ``color`` task."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r1vision.tasks.base import RewardSpec, RunContext, Task
from r1vision.tasks.color.data import load_color_dataset
from r1vision.tasks.color.prompts import answer_text
from r1vision.tasks.color.rewards import color_accuracy, color_format
from r1vision.tasks.options import NoOptions


class ColorTask(Task):
    """Name the colour of a single shape. Rows: ``image``, ``question``, ``answer`` (colour word)."""

    name = "color"
    description = "name the colour of the shape (built-in smoke-test task)"
    Options = NoOptions
    max_new_tokens = 16
    synthesizer = "r1vision.tasks.color.synth:synth_color"

    def load(self, source: str | Path, split: str, opts: NoOptions, run: RunContext):
        return load_color_dataset(source, split)

    def sft_target(self, row: Mapping[str, Any], opts: NoOptions, run: RunContext) -> str:
        return answer_text(row["answer"])

    def rewards(self, opts: NoOptions, run: RunContext) -> list[RewardSpec]:
        return [
            RewardSpec("accuracy", color_accuracy, weight=1.0),
            RewardSpec("format", color_format, weight=0.5),
        ]
