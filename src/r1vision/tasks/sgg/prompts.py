"""Prompts and answer format for scene-graph generation.

The model answers ``<answer>{"objects": [...], "relationships": [...]}</answer>``, optionally after
``<think>...</think>``. Objects are ``{"id": "name.N", "bbox": [x1, y1, x2, y2]}`` in the model family's
box frame (see :mod:`r1vision.tasks.sgg.boxes`); relationships ``{"subject", "predicate", "object"}`` use
object ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from r1vision.tasks.sgg.boxes import frame_description

ANSWER_EXAMPLE = (
    '{"objects": [{"id": "man.1", "bbox": [x1, y1, x2, y2]}, {"id": "horse.1", "bbox": [x1, y1, x2, y2]}], '
    '"relationships": [{"subject": "man.1", "predicate": "riding", "object": "horse.1"}]}'
)


def build_prompt(
    *,
    family: str | None = None,
    objects: Sequence[str] | None = None,
    predicates: Sequence[str] | None = None,
    think: bool = False,
) -> str:
    """User instruction text. Closed vocabulary when ``objects``/``predicates`` are given, else open."""
    lines = [
        "Generate the scene graph of this image: detect the salient objects and the relationships between them.",
        f"Give every object a unique id 'name.N' (category name, a dot, a running number) and a bounding box "
        f"{frame_description(family)}.",
    ]
    if objects:
        lines.append("Object categories (use only these names): " + ", ".join(objects) + ".")
    if predicates:
        lines.append("Predicates (use only these): " + ", ".join(predicates) + ".")
    if not objects and not predicates:
        lines.append("Use short, common English nouns for objects and short phrases for predicates.")
    if think:
        lines.append(
            "First reason briefly inside <think> </think>, then give the final answer inside <answer> </answer>."
        )
    else:
        lines.append("Give the answer inside <answer> </answer>.")
    lines.append("Answer format: " + ANSWER_EXAMPLE)
    return "\n".join(lines)


def compact_prompt(family: str | None = None) -> str:
    """A short instruction (about 25 tokens) for small models trained from scratch on the answer format.

    Long prompts cost tiny CPU models most of their sequence length; the format is taught by SFT instead.
    """
    return f"Scene graph: objects with boxes {frame_description(family)}, then relationships, in <answer> </answer>."


# R1-SGG's inputs (``prompt: "r1sgg"``): the system message of the DeepSeek-R1 template, which R1-SGG trains
# with unless <think> tags are off, and the plain one it uses then.
R1_THINK_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>"
)
R1SGG_PLAIN_SYSTEM = "You are a helpful and multimodal AI assistant."
# The open-vocabulary user text of R1-SGG's GRPO, SFT and inference (its prompt gallery's PROMPT_SG; it never
# reads the dataset's prompt_open): checkpoints trained there are evaluated on exactly this input.
R1SGG_PROMPT_SG = 'Generate a structured scene graph for an image using the following format:\n\n```json\n{\n  "objects": [\n    {"id": "object_name.number", "bbox": [x1, y1, x2, y2]},\n    ...\n  ],\n  "relationships": [\n    {"subject": "object_name.number", "predicate": "relationship_type", "object": "object_name.number"},\n    ...\n  ]\n}\n```\n\n### **Guidelines:**\n- **Objects:**\n  - Assign a unique ID for each object using the format `"object_name.number"` (e.g., `"person.1"`, `"bike.2"`).\n  - Provide its bounding box `[x1, y1, x2, y2]` in integer pixel format.\n  - Include all visible objects, even if they have no relationships.\n\n- **Relationships:**\n  - Represent interactions accurately using `"subject"`, `"predicate"`, and `"object"`.\n  - Omit relationships for orphan objects.\n\n### **Example Output:**\n```json\n{\n  "objects": [\n    {"id": "person.1", "bbox": [120, 200, 350, 700]},\n    {"id": "bike.2", "bbox": [100, 600, 400, 800]},\n    {"id": "helmet.3", "bbox": [150, 150, 280, 240]},\n    {"id": "tree.4", "bbox": [500, 100, 750, 700]}\n  ],\n  "relationships": [\n    {"subject": "person.1", "predicate": "riding", "object": "bike.2"},\n    {"subject": "person.1", "predicate": "wearing", "object": "helmet.3"}\n  ]\n}\n```\n\nNow, generate the complete scene graph for the provided image:\n'
_IMAGE_SIZE = re.compile(r"of size \(\d+ x \d+\) ")


def r1sgg_prompt(dataset_prompt: str) -> str:
    """The user text R1-SGG trains with, from its dataset's ``prompt_open`` / ``prompt_close`` column: the
    image size left out and the answer tags written as a json fence, as its training collator does."""
    text = _IMAGE_SIZE.sub("", dataset_prompt)
    return text.replace("<answer>", "```json").replace("</answer>", "```")


def build_messages(text: str, system: str | None = None, num_images: int = 1) -> list[dict[str, Any]]:
    """Conversational prompt with ``num_images`` image placeholders before the text."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(num_images)]
    content.append({"type": "text", "text": text})
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "user", "content": content})
    return messages


def format_answer(objects: Sequence[dict[str, Any]], relationships: Sequence[dict[str, Any]]) -> str:
    """``<answer>{json}</answer>`` for already-converted objects (model-frame boxes) and relationships."""
    payload = {
        "objects": [{"id": o["id"], "bbox": list(o["bbox"])} for o in objects],
        "relationships": [
            {"subject": r["subject"], "predicate": r["predicate"], "object": r["object"]}
            for r in relationships
        ],
    }
    return "<answer>" + json.dumps(payload) + "</answer>"
