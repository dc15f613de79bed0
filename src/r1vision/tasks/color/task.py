"""``ColorTask``: loading, prompts, SFT targets and rewards of the ``color`` task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r1vision.tasks.base import RewardSpec, Task
from r1vision.tasks.color.rewards import color_accuracy, color_format
from r1vision.tasks.loading import load_rows

PROMPT = "{question} Answer with one word inside <answer></answer>."


class ColorTask(Task):
    """Name the colour of a single shape. Rows: ``image``, ``question``, ``answer`` (colour word)."""

    name = "color"
    description = "name the colour of the shape (built-in smoke-test task)"

    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        from r1vision.tasks.color.synth import synth_color

        return synth_color(out_dir, n, seed=seed, split=split, **kwargs)

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        self.check_options(kwargs)
        dataset = load_rows(source, split, required=("image", "question", "answer"))
        return dataset.map(self._to_trainer_row, desc="color: building prompts")

    def _to_trainer_row(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "prompt": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image"},
                        {"type": "text", "text": PROMPT.format(question=row["question"])},
                    ],
                }
            ],
            "images": [row["image"]],
            "completion": [
                {"role": "assistant", "content": [{"type": "text", "text": self.completion_text(row)}]}
            ],
        }

    def completion_text(self, row: dict[str, Any], **kwargs: Any) -> str:
        return f"<answer>{row['answer']}</answer>"

    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        self.check_options(kwargs)
        return [
            RewardSpec("accuracy", color_accuracy, weight=1.0),
            RewardSpec("format", color_format, weight=0.5),
        ]
