"""Rows of the ``color`` task (``image``, ``question``, ``answer``) in trainer format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r1vision.tasks.color.prompts import PROMPT, answer_text
from r1vision.tasks.loading import load_rows

REQUIRED = ("image", "question", "answer")


def to_trainer_row(row: dict[str, Any]) -> dict[str, Any]:
    """Prompt (image + question), the image, and the SFT target."""
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
            {"role": "assistant", "content": [{"type": "text", "text": answer_text(row["answer"])}]}
        ],
    }


def load_color_dataset(source: str | Path, split: str = "train"):
    """``split`` of ``source`` through the shared loader, in trainer format."""
    dataset = load_rows(source, split, required=REQUIRED)
    return dataset.map(to_trainer_row, desc="color: building prompts")
