"""The prompt of the ``motion`` task (multiple choice, answered by option letter)."""

from __future__ import annotations

from collections.abc import Sequence

PROMPT = "{problem}\nOptions:\n{options}\nAnswer with the option letter inside <answer></answer>."


def prompt_text(problem: str, options: Sequence[str]) -> str:
    """The question with its lettered options, one per line."""
    return PROMPT.format(problem=problem, options="\n".join(options))


def answer_text(letter: str) -> str:
    """The target answer as the prompt asks for it (Video-R1's ``solution`` format)."""
    return f"<answer>{letter}</answer>"
