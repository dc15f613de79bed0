"""``generation_backend: vllm_server`` with ``vllm_server_per_rank``: one r1vision server per training process.

Server mode talks to r1vision's own servers (:mod:`r1vision.generation.vllm_server`) instead of TRL's:
each training process sends its own prompts to the server on ``vllm_server_port + local rank`` (no
gather to rank 0) and pushes the parameters that can have changed to it over HTTP (every rank takes
part in the ZeRO-3 gathers). Servers never sleep, so they keep the frozen weights they started with.
At start-up the client checks that its server resizes images with the trainer's budget, takes enough
images (and videos) per prompt and holds a rollout's full length. Clips travel as lossless PNG frames with
their metadata (the trainer sampled and resized them; the server does neither).
"""

from __future__ import annotations

import contextlib
from typing import Any

from r1vision.generation.vllm_client import VLLMServerClient
from r1vision.generation.vllm_engine import check_prompt_ids, collapse_placeholders, video_marks
from r1vision.generation.vllm_trl import VisionVLLMBase
from r1vision.generation.weight_sync import sync_param_names
from r1vision.vision.budget import PixelBudget


class PerRankVLLMGeneration(VisionVLLMBase):
    """TRL's server-mode ``VLLMGeneration`` talking to this process's own r1vision server."""

    lora_adapters: bool = False  # set by the trainer from vllm_lora_adapters

    def _init_vllm(self) -> None:
        """Connect to this process's own server (``server_port + local rank``) and check its settings."""

        if self.server_base_url is not None:
            raise ValueError(
                "vllm_server_per_rank uses vllm_server_host and vllm_server_port + local rank; "
                "unset vllm_server_base_url"
            )
        self._set_max_model_length()
        host = "127.0.0.1" if self.server_host in ("0.0.0.0", "") else self.server_host
        port = int(self.server_port) + self.accelerator.local_process_index
        self.vllm_client = VLLMServerClient(f"http://{host}:{port}")
        info = self.vllm_client.wait_healthy(self.server_timeout)
        check_server_info(info, port, self.budget, self.max_images, self.max_model_length, self.max_videos)
        if self.lora_adapters:
            from r1vision.generation.lora_push import checked_adapter_rank

            rank = checked_adapter_rank(self.model)
            if int(info.get("max_lora_rank") or 0) < rank:
                raise ValueError(
                    f"vllm_lora_adapters: the vLLM server on port {port} runs with max_lora_rank "
                    f"{info.get('max_lora_rank') or 0}, the adapter has rank {rank}: start `r1vision vllm-serve` "
                    f"with the training --config (or --max-lora-rank {rank})"
                )
        self._translate_generation_kwargs()
        self.accelerator.wait_for_everyone()

    def _generate(self, prompts, images, num_generations, profiler, image_token, videos=None) -> tuple:
        """This process's prompts on its own server: a run of identical prompts (a GRPO group's share on
        this rank) becomes one request with ``n`` = the run's length."""
        runs: list[tuple[int, int]] = []  # (first index, length)
        for i in range(len(prompts)):
            if (
                runs
                and _same_prompt(prompts, images, runs[-1][0], i)
                and _same_prompt(prompts, videos, runs[-1][0], i)
            ):
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
        marks = video_marks(self.processing_class) if videos is not None else None
        requests = []
        for start, n in runs:
            imgs = list(images[start] or []) if images is not None else []
            clips = list(videos[start] or []) if videos is not None else []
            ids = collapse_placeholders(prompts[start], image_token, marks)
            requests.append({"prompt_token_ids": ids, "images": imgs, "videos": clips, "n": n})
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
            token = marks[0] if marks is not None and videos[start] else image_token
            if token is not None:
                check_prompt_ids(
                    result["prompt_token_ids"], prompts[start], int(token), f"rollout prompt {start}"
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

    def sync_weights(self) -> None:
        """Every rank walks the parameters (ZeRO-3 gathers are collective) and pushes to its own server;
        with ``vllm_lora_adapters`` only the adapter (:mod:`~r1vision.generation.lora_push`)."""
        if self.lora_adapters:
            from r1vision.generation.lora_push import adapter_payload

            self.vllm_client.update_adapter(*adapter_payload(self.model, self._dist.gather_params))
            return
        names = sync_param_names(self.model)
        if names:  # nothing trainable: the server keeps the checkpoint it started from
            self.vllm_client.update_weights(names, self._iter_named_params())


def check_server_info(
    info: dict[str, Any],
    port: int,
    budget: PixelBudget,
    max_images: int,
    max_model_len: int | None,
    max_videos: int = 0,
) -> None:
    """Refuse a server that resizes images differently, takes fewer images or videos or holds shorter
    sequences (clips arrive sampled and resized by the trainer: no video budget to compare)."""
    served = info.get("budget") or {}
    if (served.get("min_pixels"), served.get("max_pixels")) != (budget.min_pixels, budget.max_pixels):
        raise ValueError(
            f"the vLLM server on port {port} resizes images to min_pixels={served.get('min_pixels')}, "
            f"max_pixels={served.get('max_pixels')}, the trainer to {budget.min_pixels}, "
            f"{budget.max_pixels}: start `r1vision vllm-serve` with the training --config (or "
            f"--min-pixels {budget.min_pixels} --max-pixels {budget.max_pixels})"
        )
    if int(info.get("max_images_per_prompt", 1)) < max_images:
        raise ValueError(
            f"the vLLM server on port {port} takes {info.get('max_images_per_prompt')} image(s) per "
            f"prompt, the trainer up to {max_images}: pass --max-images-per-prompt {max_images}"
        )
    if int(info.get("max_videos_per_prompt") or 0) < max_videos:
        raise ValueError(
            f"the vLLM server on port {port} takes {info.get('max_videos_per_prompt') or 0} video(s) per "
            f"prompt, the trainer up to {max_videos}: start `r1vision vllm-serve` with the training --config "
            f"(or --max-videos-per-prompt {max_videos})"
        )
    served_len = info.get("max_model_len")
    if max_model_len and served_len and int(served_len) < int(max_model_len):
        raise ValueError(
            f"the vLLM server on port {port} holds sequences of {served_len} tokens, a rollout needs up to "
            f"{max_model_len}: start `r1vision vllm-serve` with the training --config (or --max-model-len)"
        )


def _same_prompt(prompts: list[list[int]], images: list | None, a: int, b: int) -> bool:
    """Whether samples ``a`` and ``b`` are the same prompt (the trainer repeats rows with shared images,
    or clips: ``images`` is either)."""
    if list(prompts[a]) != list(prompts[b]):
        return False
    if images is None:
        return True
    ia, ib = images[a] or [], images[b] or []
    return len(ia) == len(ib) and all(x is y for x, y in zip(ia, ib, strict=True))
