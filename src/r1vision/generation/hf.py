"""Batched generation with ``transformers`` for inference and evaluation (CPU or any GPU).

Every decoding parameter comes from :class:`SamplingOptions`, never from the checkpoint's
``generation_config.json``: the real Qwen2/2.5-VL files set ``top_k: 1`` and ``top_p: 0.001`` (and Qwen2-VL
``repetition_penalty: 1.05``), which ``generate`` would otherwise apply to any value left unset, so
"sampling at temperature 1.0" would silently be greedy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from r1vision.generation.sampling import SamplingOptions
from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import fit_to_budget, images_of_row, load_image


def generation_config(model: Any, processor: Any, options: SamplingOptions) -> Any:
    """A ``GenerationConfig`` with every decoding parameter set from ``options`` (only the stop and pad
    tokens come from the model), so no value of the checkpoint's ``generation_config.json`` applies."""
    from transformers import GenerationConfig

    own = getattr(model, "generation_config", None)
    eos = getattr(own, "eos_token_id", None) if own is not None else None
    kwargs: dict[str, Any] = dict(
        max_new_tokens=options.max_new_tokens,
        do_sample=not options.greedy,
        num_return_sequences=options.num_samples,
        pad_token_id=processor.tokenizer.pad_token_id,
        eos_token_id=eos if eos is not None else processor.tokenizer.eos_token_id,
        repetition_penalty=options.repetition_penalty,
        # neutral values for every sampling filter a checkpoint may set (unset ones are filled from it);
        # greedy decoding applies no filter, so there they take the values transformers' validation
        # expects of a greedy config (top_k 50, min_p unset) instead of warning on every call
        temperature=1.0 if options.greedy else options.temperature,
        top_k=50 if options.greedy else options.top_k,
        top_p=1.0 if options.greedy else options.top_p,
        min_p=None if options.greedy else options.min_p,
        typical_p=1.0,
        epsilon_cutoff=0.0,
        eta_cutoff=0.0,
        no_repeat_ngram_size=0,
        num_beams=1,
        length_penalty=1.0,
    )
    # a sampled image or video placeholder token breaks the next forward
    placeholders = [getattr(model.config, k, None) for k in ("image_token_id", "video_token_id")]
    if any(t is not None for t in placeholders):
        kwargs["suppress_tokens"] = [t for t in placeholders if t is not None]
    return GenerationConfig(**kwargs)


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
    videos: Sequence[list[Any]] | None = None,
) -> list[list[str]]:
    """Generate ``options.num_samples`` completions for each row; returns one list of texts per row.

    ``images`` (per row, already resized to ``budget``) skips loading when the caller has them; ``videos``
    (per row, :class:`~r1vision.vision.video.Clip` values from ``load_clip``) fill the prompts' video parts.
    """
    videos = [list(v) for v in videos] if videos is not None else [[] for _ in rows]
    prompts = [_with_video_parts(row["prompt"], clips) for row, clips in zip(rows, videos, strict=True)]
    texts = [processor.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    if images is None:
        images = [prepare_prompt_images(row, budget, image_root) for row in rows]
    images = [list(imgs) for imgs in images]
    has_images = any(images)
    processor.tokenizer.padding_side = "left"
    flat_videos = [clip for clips in videos for clip in clips]
    inputs = processor(
        text=texts,
        images=images if has_images else None,
        videos=flat_videos or None,
        padding=True,
        return_tensors="pt",
    ).to(model.device)
    if not options.greedy:
        torch.manual_seed(options.seed)
    out = model.generate(**inputs, generation_config=generation_config(model, processor, options))
    decoded = processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    k = options.num_samples
    return [decoded[i * k : (i + 1) * k] for i in range(len(rows))]


def _with_video_parts(prompt: Any, clips: list[Any]) -> Any:
    """A prompt with a ``{"type": "video"}`` part per clip (added before the first user message's text when
    it has none), so the chat template emits one video placeholder per clip."""
    if not clips:
        return prompt
    from r1vision.vision.video import fill_video_parts

    return fill_video_parts(prompt, clips, "prompt")
