"""Batched generation with ``transformers`` for inference and evaluation (CPU or any GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import fit_to_budget, images_of_row, load_image


@dataclass
class SamplingOptions:
    """Decoding settings; ``temperature <= 0`` means greedy."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    num_samples: int = 1
    seed: int = 0


def prepare_prompt_images(row: dict[str, Any], budget: PixelBudget, image_root: str | None = None):
    """The row's images loaded and resized to the budget (the same rule training uses)."""
    return [fit_to_budget(load_image(v, image_root), budget) for v in images_of_row(row)]


@torch.no_grad()
def generate(
    model: Any,
    processor: Any,
    rows: Sequence[dict[str, Any]],
    budget: PixelBudget,
    options: SamplingOptions,
    image_root: str | None = None,
    images: Sequence[list[Any]] | None = None,
) -> list[list[str]]:
    """Generate ``options.num_samples`` completions for each row; returns one list of texts per row.

    ``images`` (per row, already resized to ``budget``) skips loading when the caller has them.
    """
    texts = [
        processor.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        for row in rows
    ]
    if images is None:
        images = [prepare_prompt_images(row, budget, image_root) for row in rows]
    images = [list(imgs) for imgs in images]
    has_images = any(images)
    processor.tokenizer.padding_side = "left"
    inputs = processor(
        text=texts, images=images if has_images else None, padding=True, return_tensors="pt"
    ).to(model.device)
    sample = options.temperature > 0
    generator_kwargs: dict[str, Any] = dict(
        max_new_tokens=options.max_new_tokens,
        do_sample=sample,
        num_return_sequences=options.num_samples,
        pad_token_id=processor.tokenizer.pad_token_id,
    )
    if sample:
        generator_kwargs.update(temperature=options.temperature, top_p=options.top_p)
        torch.manual_seed(options.seed)
    image_token = getattr(model.config, "image_token_id", None)
    if image_token is not None:
        generator_kwargs["suppress_tokens"] = [image_token]  # a sampled image token breaks the next forward
    out = model.generate(**inputs, **generator_kwargs)
    decoded = processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    k = options.num_samples
    return [decoded[i * k : (i + 1) * k] for i in range(len(rows))]
