"""``vllm_lora_adapters``: a weight sync that sends the LoRA adapter, not merged weights.

The default sync merges each LoRA layer (``W + s * B @ A``) and pushes the result: for a 7B model with
LoRA on every language-model linear layer that is ~13 GB per rank per step, although only the adapter
(tens of MB) changed. With ``vllm_lora_adapters`` the engine starts with vLLM's LoRA support on
(``enable_lora``), the base weights never move, and each sync writes the adapter (PEFT's format, gathered
under ZeRO-3) to a folder of this process (colocate) or posts it to the process's server (per-rank servers,
``POST /adapter``), and the engine generates through a new ``LoRARequest``; vLLM loads it and applies ``s * B @ A`` on the fly. Greedy decodings then equal the PEFT
model's token for token (checked in ``tests/generation/test_vllm_colocate.py``).

What cannot travel as an adapter is refused before training (:func:`adapter_problems`): parameters trained
outside the adapters (a full vision tower, ``modules_to_save``), DoRA, adapters on the vision tower (vLLM
applies LoRA to the language model), and sleep mode (level 2 drops the base weights, which this sync
never re-sends).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's LoRAConfig.max_lora_rank choices
_VISION_MARKERS = ("visual.", "vision_tower.", "vision_model.", "merger.")


def engine_lora_rank(r: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds rank ``r``."""
    for rank in VLLM_LORA_RANKS:
        if rank >= r:
            return rank
    raise ValueError(f"LoRA rank {r} is above vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}")


def checked_adapter_rank(model: torch.nn.Module) -> int:
    """The adapter's rank, after refusing (``ValueError``) what cannot travel as an adapter."""
    problems = adapter_problems(model)
    if problems:
        raise ValueError("; ".join(problems))
    return int(model.peft_config["default"].r)


def adapter_problems(model: torch.nn.Module) -> list[str]:
    """Why this model's trained weights cannot reach vLLM as a LoRA adapter (empty: they can)."""
    config = getattr(model, "peft_config", {}).get("default")
    if config is None:
        return ["vllm_lora_adapters needs LoRA (set lora_r or use_peft)"]
    problems = []
    if getattr(config, "use_dora", False):
        problems.append("vllm_lora_adapters with use_dora: vLLM's LoRA has no magnitude vector")
    outside = [n for n, p in model.named_parameters() if p.requires_grad and ".lora_" not in n]
    if outside:
        problems.append(
            f"vllm_lora_adapters: {len(outside)} trained tensors are not LoRA adapters (e.g. {outside[0]}); "
            "freeze them (freeze_vision_tower, no modules_to_save) or use the merged-weight sync"
        )
    vision = [
        n for n, p in model.named_parameters() if ".lora_" in n and any(m in n for m in _VISION_MARKERS)
    ]
    if vision:
        problems.append(
            f"vllm_lora_adapters: adapters on the vision tower ({vision[0]}); vLLM applies LoRA to the "
            "language model only: target language-model modules or use the merged-weight sync"
        )
    return problems


@torch.no_grad()
def adapter_payload(
    model: torch.nn.Module, gather: Callable[[list], AbstractContextManager] | None = None
) -> tuple[bytes, dict[str, Any]]:
    """The adapter as safetensors bytes (PEFT's names and fp32 values) and its PEFT config as JSON values.

    ``gather(params)`` materialises sharded parameters (TRL's ``DistributedBackend.gather_params``); every
    rank calls it with the same list, as ZeRO-3 requires."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    gather = gather or (lambda params: nullcontext())
    params = [p for n, p in model.named_parameters() if ".lora_" in n]
    with gather(params):
        state = get_peft_model_state_dict(model)
        state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}
    config = json.loads(json.dumps(model.peft_config["default"].to_dict(), default=_json_value))
    return save(state), config


def _json_value(value: Any) -> Any:
    return sorted(value) if isinstance(value, set) else str(value)


class AdapterVersions:
    """Adapter versions in folders under ``root`` (``v1``, ``v2``, ...), each with the ``LoRARequest`` that
    makes vLLM load it; older folders are removed once ``keep`` newer ones exist (vLLM reads a folder when
    a request first uses it)."""

    def __init__(self, root: str | None = None, keep: int = 2) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="r1vision-lora-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.version = 0
        self.request: Any = None
        self.bytes_sent = 0  # size of the last adapter

    def add(self, data: bytes, config: dict[str, Any]) -> Any:
        """Write one adapter (safetensors bytes + PEFT config) and return its ``LoRARequest``."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        folder = self.root / f"v{self.version}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "adapter_model.safetensors").write_bytes(data)
        (folder / "adapter_config.json").write_text(json.dumps(config, indent=1))  # r and alpha with it
        self.bytes_sent = len(data)
        self.request = LoRARequest(f"r1vision-{self.version}", self.version, str(folder))
        shutil.rmtree(self.root / f"v{self.version - self.keep}", ignore_errors=True)  # older ones are gone
        return self.request


class AdapterPush(AdapterVersions):
    """Colocate mode: each sync writes this process's adapter and points the in-process engine at it."""

    def __init__(self, model: torch.nn.Module, root: str | None = None, keep: int = 2) -> None:
        super().__init__(root, keep)
        self.model = model

    def push(self, gather: Callable[[list], AbstractContextManager] | None = None) -> Any:
        """Save the current adapter and return the ``LoRARequest`` that generation now uses."""
        return self.add(*adapter_payload(self.model, gather))

    def wrap_generate(self, llm: Any) -> None:
        """Every ``llm.generate`` call (TRL's rollouts, r1vision's evaluation) uses the current adapter."""
        original = llm.generate

        def generate(*args: Any, **kwargs: Any) -> Any:
            if self.request is not None and kwargs.get("lora_request") is None:
                kwargs["lora_request"] = self.request
            return original(*args, **kwargs)

        llm.generate = generate
