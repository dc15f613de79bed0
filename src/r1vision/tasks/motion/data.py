"""Rows of the ``motion`` task (Video-R1's schema) in trainer format."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from r1vision.tasks.loading import DatasetLoadError, load_rows
from r1vision.tasks.motion.prompts import answer_text, prompt_text

REQUIRED = ("problem", "options", "solution", "path")
_LETTER = re.compile(r"<answer>\s*([A-Za-z])\s*</answer>")


def solution_letter(solution: str) -> str | None:
    """The option letter of a Video-R1 ``solution`` (``<answer>B</answer>``), upper-cased, or ``None``."""
    found = _LETTER.search(solution or "")
    return found.group(1).upper() if found else None


def to_trainer_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    """Prompt (video + question + options), the video, the answer letter and the SFT target."""
    letter = solution_letter(row["solution"])
    if letter is None:
        raise DatasetLoadError(f"row {index}: solution {row['solution']!r} holds no <answer>LETTER</answer>")
    return {
        "prompt": [
            {
                "role": "user",
                "content": [
                    {"type": "video"},
                    {"type": "text", "text": prompt_text(row["problem"], row["options"])},
                ],
            }
        ],
        "video": row["path"],
        "answer": letter,
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": answer_text(letter)}]}],
    }


def load_motion_dataset(source: str | Path, split: str = "train"):
    """``split`` of ``source`` through the shared loader (video paths made absolute), in trainer format."""
    dataset = load_rows(source, split, required=REQUIRED)
    return dataset.map(to_trainer_row, with_indices=True, desc="motion: building prompts")
