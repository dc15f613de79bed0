"""What every r1vision vLLM backend changes in TRL 1.16's ``VLLMGeneration``, and the switch into TRL.

:class:`VisionVLLMBase` holds what the backends share:

- the run's pixel budget, read back from the trainer's processor through the one resolver
  (:func:`r1vision.vision.budget.resolve_budget`), so the engine and training resize images alike;
- the image and video limits and ``max_model_len`` (:mod:`r1vision.generation.vllm_plan`);
- a video batch's clips (:attr:`VisionVLLMBase.pending_videos`, set by the trainer: TRL passes images
  only), sent already sampled and resized, one unexpanded placeholder per video;
- ``generation_kwargs["suppress_tokens"]`` (a transformers option) becomes a vLLM ``logit_bias``, and the
  image placeholder is always suppressed: a sampled one would add a placeholder without features to
  the training forward;
- the weight iteration for a sync (:mod:`~r1vision.generation.weight_sync`): only parameters that can
  have changed, in whole fused groups, LoRA merged per module out of place, one tensor at a time;
  ``full=True`` walks every parameter, for an engine that dropped its weights (sleep level 2).

The backends: :mod:`~r1vision.generation.vllm_colocate` (one in-process engine per training process)
and :mod:`~r1vision.generation.vllm_per_rank` (one r1vision server per training process). TRL's own
server mode uses :class:`VisionVLLMBase` directly. :func:`vision_vllm_generation` swaps the right class
into TRL while ``GRPOTrainer.__init__`` builds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from trl.generation.vllm_generation import VLLMGeneration

from r1vision.generation.vllm_plan import model_context
from r1vision.generation.weight_sync import (  # noqa: F401 - re-exported: the backends and the dry run use them
    changing_modules,
    iter_sync_tensors,
    module_of,
    sync_modules,
)
from r1vision.vision.budget import PixelBudget, resolve_budget
from r1vision.vision.family import model_family

_SUPPRESS_BIAS = -100.0  # vLLM clamps logit_bias to [-100, 100]; exp(-100) never samples


class VisionVLLMBase(VLLMGeneration):
    """TRL's ``VLLMGeneration`` with the pieces every r1vision backend shares (see the module docstring)."""

    max_images: int = 1
    max_videos: int = 0  # > 0 for a video dataset (the engine's limit_mm_per_prompt)
    max_model_len: int | None = None  # resolved by the trainer (vllm_plan.resolve_max_model_len)
    # The next generate call's clips, per sample (set by the trainer as it tokenizes a video batch: TRL
    # hands the backend token IDs and images only).
    pending_videos: list[list[Any]] | None = None

    @property
    def budget(self) -> PixelBudget:
        """The trainer's pixel budget, from the processor it was applied to (no second copy to drift)."""

        return resolve_budget(model_family(self.model.config), processor=self.processing_class)

    def _init_vllm(self) -> None:
        self._set_max_model_length()
        super()._init_vllm()
        self._translate_generation_kwargs()

    def _set_max_model_length(self) -> None:
        """The run's ``max_model_len`` (unless TRL's ``vllm_max_model_length`` was given), at most the
        model's context."""
        if self.max_model_len is None or self.max_model_length:
            return

        context = model_context(self.model.config)
        self.max_model_length = min(int(self.max_model_len), context) if context else int(self.max_model_len)

    def _translate_generation_kwargs(self) -> None:
        kwargs = dict(self.generation_kwargs)
        suppress = [int(t) for t in kwargs.pop("suppress_tokens", None) or []]
        image_token = getattr(self.processing_class, "image_token_id", None)
        if image_token is not None and int(image_token) not in suppress:
            suppress.append(int(image_token))
        if suppress:
            bias = dict(kwargs.get("logit_bias") or {})
            bias.update({t: _SUPPRESS_BIAS for t in suppress})
            kwargs["logit_bias"] = bias
        self.generation_kwargs = kwargs

    def generate(
        self,
        prompts: list[list[int]],
        images: list[list | None] | None,
        num_generations: int,
        profiler: Any = None,
    ) -> tuple:
        """A backend that implements :meth:`_generate` gets the prompts after the ``max_model_len`` check,
        with the processor's image token id and the batch's clips (:attr:`pending_videos`); plain server
        mode is TRL's generation unchanged, for images only."""
        videos, self.pending_videos = self.pending_videos, None
        if videos is not None and not any(videos):
            videos = None
        if type(self)._generate is VisionVLLMBase._generate:
            if videos is not None:
                raise ValueError(
                    "video rows cannot go through TRL's vLLM server (its client sends images only): use "
                    "vllm_mode colocate, or vllm_server_per_rank with `r1vision vllm-serve`"
                )
            return super().generate(prompts, images, num_generations, profiler)
        self._check_lengths(prompts)
        image_token = getattr(self.processing_class, "image_token_id", None)
        return self._generate(prompts, images, num_generations, profiler, image_token, videos)

    def _generate(
        self,
        prompts: list[list[int]],
        images: list[list | None] | None,
        num_generations: int,
        profiler: Any,
        image_token: int | None,
        videos: list[list[Any]] | None = None,
    ) -> tuple:
        """The backend's generation (see :meth:`generate`); the base class leaves it to TRL. ``videos``:
        per sample, its :class:`~r1vision.vision.video.Clip` values (``None``: an image or text batch)."""
        raise NotImplementedError

    def _check_lengths(self, prompts: list[list[int]]) -> None:
        """A prompt plus a full completion must fit ``max_model_len``, else vLLM cuts completions short."""
        limit = self.max_model_length
        if not limit:
            return
        for i, ids in enumerate(prompts):
            if len(ids) + int(self.max_completion_length) > int(limit):
                raise ValueError(
                    f"rollout prompt {i}: {len(ids)} prompt tokens + max_completion_length "
                    f"{self.max_completion_length} exceed vLLM's max_model_len {limit}; raise "
                    "max_prompt_text_tokens (or set vllm_max_model_length), or shorten the prompt"
                )

    def _iter_named_params(self, full: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
        """``(vLLM name, tensor)`` for a sync, one at a time: the parameters that can change (whole fused
        groups), or every one if ``full``; LoRA layers merged per module, out of place
        (:mod:`r1vision.generation.weight_sync`)."""
        if self._dist.is_fsdp:  # FSDP gathers by module tree in TRL's own walk; filter it
            changing = None if full else sync_modules(self.model)
            for name, tensor in super()._iter_named_params():
                if changing is None or module_of(name) in changing:
                    yield name, tensor
            return
        yield from iter_sync_tensors(self.model, self._dist.gather_params, full=full)


def sync_summary(model: torch.nn.Module, full: bool = False) -> dict[str, int]:
    """How many tensors / elements a sync sends (``full``: after the engine dropped its weights).

    Counts the base model's parameters (LoRA adapters are merged into their base layer, not sent).
    """
    changing = sync_modules(model)
    tensors = elements = total_tensors = total_elements = 0
    for name, param in model.named_parameters():
        if ".lora_" in name or "original_module" in name:
            continue
        clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
        clean = clean.replace("modules_to_save.default.", "")
        total_tensors += 1
        total_elements += param.numel()
        if full or module_of(clean) in changing:
            tensors += 1
            elements += param.numel()
    return {
        "tensors": tensors,
        "elements": elements,
        "total_tensors": total_tensors,
        "total_elements": total_elements,
    }


def model_dtype(model: torch.nn.Module) -> str:
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return str(dtype).removeprefix("torch.")
