"""``ColorTask``: loading, prompts, SFT targets and rewards of the ``color`` task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r1vision.tasks.base import RewardSpec, Task
from r1vision.tasks.color.data import load_color_dataset
from r1vision.tasks.color.prompts import answer_text
from r1vision.tasks.color.rewards import color_accuracy, color_format


class ColorTask(Task):
    """Name the colour of a single shape. Rows: ``image``, ``question``, ``answer`` (colour word)."""

    name = "color"
    description = "name the colour of the shape (built-in smoke-test task)"

    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        from r1vision.tasks.color.synth import synth_color

        return synth_color(out_dir, n, seed=seed, split=split, **kwargs)

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        self.check_options(kwargs)
        return load_color_dataset(source, split)

    def completion_text(self, row: dict[str, Any], **kwargs: Any) -> str:
        return answer_text(row["answer"])

    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        self.check_options(kwargs)
        return [
            RewardSpec("accuracy", color_accuracy, weight=1.0),
            RewardSpec("format", color_format, weight=0.5),
        ]
