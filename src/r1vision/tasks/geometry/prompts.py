"""Prompts of the ``geometry`` task: MAYE's questions with ``<image>`` placeholders, plus an instruction."""

from __future__ import annotations

from typing import Any

IMAGE_PLACEHOLDER = "<image>"
DEFAULT_INSTRUCTION = "Think step by step, then put the final answer in \\boxed{}."


def build_prompt(
    question: str,
    n_images: int,
    instruction: str | None = DEFAULT_INSTRUCTION,
    system_prompt: str | None = None,
) -> list[dict[str, Any]]:
    """Chat messages for one question: text split around ``<image>`` into text and image parts.

    Without placeholders the images come first. The instruction is appended to the last text part.
    """
    pieces = question.split(IMAGE_PLACEHOLDER)
    if len(pieces) - 1 not in (0, n_images):
        raise ValueError(f"{len(pieces) - 1} {IMAGE_PLACEHOLDER} placeholder(s) but {n_images} image(s)")
    content: list[dict[str, Any]] = []
    if len(pieces) == 1:
        content.extend({"type": "image"} for _ in range(n_images))
    for i, piece in enumerate(pieces):
        if i > 0:
            content.append({"type": "image"})
        if piece.strip():
            content.append({"type": "text", "text": piece.strip()})
    if instruction:
        if content and content[-1]["type"] == "text":
            content[-1] = {"type": "text", "text": f"{content[-1]['text']}\n{instruction}"}
        else:
            content.append({"type": "text", "text": instruction})
    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    messages.append({"role": "user", "content": content})
    return messages
