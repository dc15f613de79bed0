"""What every r1vision vLLM backend changes in TRL 1.16's ``VLLMGeneration``, and the switch into TRL.

:class:`VisionVLLMBase` holds what the backends share:

- the run's pixel budget, read back from the trainer's processor through the one resolver
  (:func:`r1vision.vision.budget.resolve_budget`), so the engine and training resize images alike;
- the image limit and ``max_model_len`` (:mod:`r1vision.generation.vllm_plan`);
- ``generation_kwargs["suppress_tokens"]`` (a transformers option) becomes a vLLM ``logit_bias``, and the
  image placeholder is always suppressed: a sampled one would add a placeholder without features to
  the training forward;
- the weight iteration for a sync: by default only parameters that can have changed (a frozen vision
  tower, frozen norms and embeddings under LoRA are skipped); ``full=True`` walks every parameter, for
  an engine that dropped its weights (sleep level 2).

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

from r1vision.vision.budget import PixelBudget

_SUPPRESS_BIAS = -100.0  # vLLM clamps logit_bias to [-100, 100]; exp(-100) never samples


class VisionVLLMBase(VLLMGeneration):
    """TRL's ``VLLMGeneration`` with the pieces every r1vision backend shares (see the module docstring)."""

    max_images: int = 1
    max_model_len: int | None = None  # resolved by the trainer (vllm_plan.resolve_max_model_len)

    @property
    def budget(self) -> PixelBudget:
        """The trainer's pixel budget, from the processor it was applied to (no second copy to drift)."""
        from r1vision.vision.budget import resolve_budget
        from r1vision.vision.family import model_family

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
        from r1vision.generation.vllm_plan import model_context

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
        with the processor's image token id; plain server mode is TRL's generation unchanged."""
        if type(self)._generate is VisionVLLMBase._generate:
            return super().generate(prompts, images, num_generations, profiler)
        self._check_lengths(prompts)
        image_token = getattr(self.processing_class, "image_token_id", None)
        return self._generate(prompts, images, num_generations, profiler, image_token)

    def _generate(
        self,
        prompts: list[list[int]],
        images: list[list | None] | None,
        num_generations: int,
        profiler: Any,
        image_token: int | None,
    ) -> tuple:
        """The backend's generation (see :meth:`generate`); the base class leaves it to TRL."""
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
        """``(vLLM name, tensor)`` for a sync: the parameters that can change, or every one if ``full``."""
        if full:
            yield from super()._iter_named_params()
            return
        changing = changing_modules(self.model)
        if getattr(self.model, "peft_config", None) is not None or self._dist.is_fsdp:
            # PEFT merges adapters over the gathered model first; filter TRL's own iteration.
            for name, tensor in super()._iter_named_params():
                if module_of(name) in changing:
                    yield name, tensor
            return
        # Full fine-tuning: skip frozen tensors before gathering them (same decision on every rank).
        for name, param in self.model.named_parameters():
            name = self._fix_param_name_to_vllm(name)
            if module_of(name) not in changing:
                continue
            with self._dist.gather_params([param]):
                yield name, param.data


def module_of(name: str) -> str:
    """The module path of a parameter name (``a.b.weight`` -> ``a.b``)."""
    return name.rsplit(".", 1)[0] if "." in name else ""


def changing_modules(model: torch.nn.Module) -> set[str]:
    """Module paths (in vLLM's naming, PEFT wrappers removed) holding at least one trainable parameter.

    A LoRA layer ``q_proj`` counts through its trainable ``q_proj.lora_A...``: its merged base weight
    changes. Everything else (a frozen vision tower, norms and embeddings under LoRA) never changes, and
    vLLM already holds it from the checkpoint it was started from.
    """
    out: set[str] = set()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        name = name.removeprefix("base_model.model.").replace("_checkpoint_wrapped_module.", "")
        for marker in (".lora_", ".modules_to_save.", ".base_layer."):
            if marker in name:
                out.add(name.split(marker)[0])
                break
        else:
            out.add(module_of(name))
    return out


def sync_summary(model: torch.nn.Module, full: bool = False) -> dict[str, int]:
    """How many tensors / elements a sync sends (``full``: after the engine dropped its weights).

    Counts the base model's parameters (LoRA adapters are merged into their base layer, not sent).
    """
    changing = changing_modules(model)
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
