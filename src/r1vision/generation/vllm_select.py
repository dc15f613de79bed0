"""Which r1vision vLLM backend a run gets, and the hook that hands it to TRL's ``GRPOTrainer.__init__``.

TRL builds its vLLM backend (``trl.trainer.grpo_trainer.VLLMGeneration``) inside ``__init__``; while
:func:`vision_vllm_generation` is active that name is r1vision's class for the mode (a patch listed in
:data:`r1vision.versions.PATCHES`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from r1vision.generation.vllm_colocate import ColocateVLLMGeneration
from r1vision.generation.vllm_per_rank import PerRankVLLMGeneration
from r1vision.generation.vllm_trl import VisionVLLMBase


def backend_class(mode: str, per_rank_servers: bool) -> type[VisionVLLMBase]:
    """The r1vision class for a TRL ``vllm_mode`` (and ``vllm_server_per_rank``)."""
    if mode == "colocate":
        return ColocateVLLMGeneration
    if mode == "server" and per_rank_servers:
        return PerRankVLLMGeneration
    return VisionVLLMBase


@contextlib.contextmanager
def vision_vllm_generation(
    max_images: int = 1,
    per_rank_servers: bool = False,
    mode: str = "colocate",
    max_model_len: int | None = None,
    lora_adapters: bool = False,
    max_videos: int = 0,
) -> Iterator[type[VisionVLLMBase]]:
    """While active, ``GRPOTrainer.__init__`` builds the r1vision backend for ``use_vllm``."""
    from trl.trainer import grpo_trainer

    base = backend_class(mode, per_rank_servers)
    attrs: dict[str, Any] = {
        "max_images": max_images,
        "max_videos": max_videos,
        "max_model_len": max_model_len,
    }
    if lora_adapters:
        attrs["lora_adapters"] = True
    cls = type(f"Bound{base.__name__}", (base,), attrs)
    original = grpo_trainer.VLLMGeneration
    grpo_trainer.VLLMGeneration = cls
    try:
        yield cls
    finally:
        grpo_trainer.VLLMGeneration = original
