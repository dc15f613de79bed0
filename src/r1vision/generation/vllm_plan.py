"""What a vLLM engine for a GRPO run must be given, decided before anything starts (no vLLM import).

- :func:`required_model_len`: the longest sequence a rollout can hold: the prompt's text tokens, every
  image at the pixel budget's most tokens, and ``max_completion_length``. vLLM's default
  ``max_model_len`` is the model's whole context (262,144 tokens for Qwen3-VL-4B, about 36 GiB of KV
  cache), which does not fit beside training; the run's own lengths do.
- :func:`resolve_max_model_len`: the user's ``vllm_max_model_length`` wins, else the required length.
- :func:`sleep_plan`: TRL's colocate sleep mode sleeps at level 2, which discards *every* weight;
  a sync after it must re-push every parameter, not only the trainable ones (LoRA, frozen tower).
- :func:`engine_problems`: the combinations that cannot work, each as a message (the dry run and the
  trainer refuse them before any GPU is touched).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from r1vision.vision.budget import PixelBudget

DEFAULT_PROMPT_TEXT_TOKENS = 1024


def max_image_tokens(budget: PixelBudget) -> int:
    """LM tokens of one image at the budget's largest size (one token per ``factor``² pixels)."""
    return budget.max_pixels // (budget.factor * budget.factor)


def max_video_tokens(video_budget: Any) -> int:
    """LM tokens of one video at a :class:`~r1vision.vision.video.VideoBudget`'s most frames and largest
    frames, with room for Qwen3-VL's per-step timestamp and markers (about 8 tokens a step)."""
    steps = -(-int(video_budget.max_frames) // int(video_budget.temporal_patch_size))
    per_step = video_budget.max_frame_pixels // (video_budget.factor * video_budget.factor)
    return int(steps * (per_step + 8))


def required_model_len(
    budget: PixelBudget, max_images: int, max_completion_length: int, prompt_text_tokens: int
) -> int:
    """Prompt text + ``max_images`` images at the budget + the completion: the longest rollout sequence."""
    return int(prompt_text_tokens + max_images * max_image_tokens(budget) + max_completion_length)


def resolve_max_model_len(
    user_value: int | None,
    budget: PixelBudget,
    max_images: int,
    max_completion_length: int,
    prompt_text_tokens: int | None,
    context: int | None = None,
    video_tokens: int = 0,
) -> int:
    """``vllm_max_model_length`` when set, else :func:`required_model_len` of the run's own lengths (plus
    ``video_tokens``: :func:`max_video_tokens` per video a prompt may hold), at most the model's
    ``context`` (vLLM refuses a longer one; a prompt that does not fit is refused at rollout time with
    its index)."""
    if user_value:
        return int(user_value)
    text = DEFAULT_PROMPT_TEXT_TOKENS if prompt_text_tokens is None else prompt_text_tokens
    need = required_model_len(budget, max_images, max_completion_length, text) + int(video_tokens)
    return min(need, int(context)) if context else need


def model_context(config: Any) -> int | None:
    """The model's context length (``max_position_embeddings`` of its text config), if it has one."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if value else None


@dataclass(frozen=True)
class SleepPlan:
    """How the colocated engine sleeps between rollouts and what the next sync must push."""

    level: int  # 0: no sleep mode; TRL 1.16 sleeps at level 2 (weights and KV cache discarded)
    sync_after_sleep: str  # "all": every parameter (the engine dropped them); "changing": trainable only

    def describe(self) -> str:
        if self.level == 0:
            return "off (weights stay in the engine; each sync sends the parameters that can change)"
        return (
            f"level {self.level}: the engine discards every weight while the trainer steps; the sync after "
            "wake-up re-pushes every parameter (frozen ones included)"
        )


def sleep_plan(enable_sleep_mode: bool) -> SleepPlan:
    """TRL calls ``llm.sleep(level=2)`` after every rollout; level 2 frees the weights themselves, so the
    sync that follows must restore all of them (level 1 would keep a CPU copy of every process's weights)."""
    if not enable_sleep_mode:
        return SleepPlan(0, "changing")
    return SleepPlan(2, "all")


_ASSUME_CUDA: bool | None = None


@contextlib.contextmanager
def assume_cuda(value: bool) -> Iterator[None]:
    """Judge settings for a machine with (or without) CUDA: the dry run checks the run's target machine."""
    global _ASSUME_CUDA
    previous, _ASSUME_CUDA = _ASSUME_CUDA, value
    try:
        yield
    finally:
        _ASSUME_CUDA = previous


def target_has_cuda(args: Any = None) -> bool:
    """Whether the run will have CUDA: this machine's, unless a dry run says otherwise; never with use_cpu."""
    if args is not None and getattr(args, "use_cpu", False):
        return False
    if _ASSUME_CUDA is not None:
        return _ASSUME_CUDA
    import torch

    return torch.cuda.is_available()


def engine_problems(args: Any, cuda: bool) -> list[str]:
    """Settings of a GRPO config (``VisionGRPOConfig`` or the same fields) that cannot work together."""
    problems: list[str] = []
    if not getattr(args, "use_vllm", False):
        return problems
    mode = getattr(args, "vllm_mode", "colocate")
    tp = int(getattr(args, "vllm_tensor_parallel_size", 1) or 1)
    if getattr(args, "vllm_enable_sleep_mode", False):
        if mode != "colocate":
            problems.append("vllm_enable_sleep_mode applies to colocate mode only (servers never sleep)")
        elif not cuda:
            problems.append(
                "vllm_enable_sleep_mode needs CUDA (vLLM's sleep mode uses the CUDA memory pool); "
                "turn it off on CPU"
            )
    if mode == "server" and getattr(args, "vllm_server_per_rank", False) and tp > 1:
        problems.append(
            f"vllm_server_per_rank with vllm_tensor_parallel_size={tp}: a per-rank server pushes weights "
            "into its in-process engine, which tensor-parallel workers do not share; use one server per "
            "GPU (tensor parallel 1) or TRL's server mode"
        )
    if getattr(args, "use_dora", False):
        problems.append(
            "use_dora with a vLLM backend: the engine receives merged weights W + s*B@A, which DoRA's "
            "magnitude rescaling does not follow; use plain LoRA (or rsLoRA) with vLLM, or generation_backend hf"
        )
    if getattr(args, "vllm_lora_adapters", False):
        if int(getattr(args, "lora_r", 0) or 0) <= 0:
            problems.append("vllm_lora_adapters needs LoRA (set lora_r or use_peft)")
        if getattr(args, "vllm_enable_sleep_mode", False):
            problems.append(
                "vllm_lora_adapters with vllm_enable_sleep_mode: sleep level 2 drops the engine's base weights, "
                "which an adapter sync never re-sends; turn one of them off"
            )
    util = float(getattr(args, "vllm_gpu_memory_utilization", 0.3))
    if mode == "colocate" and not 0.0 < util < 1.0:
        problems.append(f"vllm_gpu_memory_utilization={util} must be in (0, 1) when colocated with training")
    user_len = getattr(args, "vllm_max_model_length", None)
    if user_len:
        need = int(getattr(args, "max_completion_length", 0) or 0)
        if int(user_len) <= need:
            problems.append(
                f"vllm_max_model_length={user_len} leaves no room for a prompt before "
                f"max_completion_length={need} tokens"
            )
    return problems
