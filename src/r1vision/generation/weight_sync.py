"""What a weight sync sends to a vLLM engine, one tensor at a time (torch and peft only, no vLLM).

- **Only what can change.** A frozen vision tower, and norms and embeddings under LoRA, never change; the
  engine keeps them from the checkpoint it started from (``full=True`` sends everything, for an engine that
  dropped its weights in a level-2 sleep).
- **Whole fused groups.** vLLM fuses ``q_proj``/``k_proj``/``v_proj`` into one ``qkv_proj`` and
  ``gate_proj``/``up_proj`` into ``gate_up_proj``, and its layerwise reload rebuilds a fused layer from
  what it receives: sending ``q`` and ``v`` but not ``k`` (LoRA on ``q_proj v_proj``) left ``k``'s rows as
  uninitialised memory. A changing projection always brings its fused siblings along (:func:`fused_groups`).
- **LoRA merged per module, out of place.** TRL merges every adapter into the base weights in place over
  the whole gathered model, then unmerges: under ZeRO-3 each rank holds the whole model at once, and on a
  bf16 base ``W += d; W -= d`` drifts the frozen weights a little at every sync. Here each LoRA layer is
  gathered alone (base weight, bias, its adapters), ``W + scaling * B @ A`` is computed into a new tensor,
  yielded and released: the peak is one layer and the base weight is never written.
- **Streamed.** The caller consumes the generator as vLLM loads (vLLM buffers only the current layer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from r1vision.vision.hub_layout import to_hub

# Projections vLLM loads into one fused layer: a sync sends all of a group or none of it.
FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
_PEFT_PREFIX = "base_model.model."

GatherFn = Callable[[list[torch.nn.Parameter]], contextlib.AbstractContextManager]


def vllm_name(name: str) -> str:
    """A parameter or module name as the engine expects it: PEFT's wrappers and checkpointing wrappers
    removed (``base_model.model.``, ``.base_layer``, ``modules_to_save.default.``)."""
    name = name.removeprefix(_PEFT_PREFIX).replace("_checkpoint_wrapped_module.", "")
    return name.replace(".base_layer", "").replace("modules_to_save.default.", "")


def module_of(name: str) -> str:
    """The module path of a parameter name (``a.b.weight`` -> ``a.b``)."""
    return name.rsplit(".", 1)[0] if "." in name else ""


def _is_adapter(name: str) -> bool:
    return ".lora_" in name or "original_module" in name


def changing_modules(model: torch.nn.Module) -> set[str]:
    """Module paths (engine naming) holding at least one trainable parameter; a LoRA layer counts through
    its trainable adapters (its merged weight changes)."""
    out: set[str] = set()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        name = name.removeprefix(_PEFT_PREFIX).replace("_checkpoint_wrapped_module.", "")
        for marker in (".lora_", ".modules_to_save.", ".base_layer."):
            if marker in name:
                out.add(name.split(marker)[0])
                break
        else:
            out.add(module_of(name))
    return out


def fused_groups(modules: Iterable[str]) -> set[str]:
    """``modules`` with every fused sibling added: ``...q_proj`` brings ``...k_proj`` and ``...v_proj``."""
    out = set(modules)
    for path in list(out):
        parent, _, leaf = path.rpartition(".")
        for group in FUSED_GROUPS:
            if leaf in group:
                out.update(f"{parent}.{member}" if parent else member for member in group)
    return out


def sync_modules(model: torch.nn.Module) -> set[str]:
    """What a partial sync sends: the changing modules, completed to whole fused groups."""
    return fused_groups(changing_modules(model))


def sync_param_names(model: torch.nn.Module, full: bool = False) -> list[str]:
    """Engine names of the tensors a sync sends, in order, without gathering or copying anything."""
    modules = None if full else sync_modules(model)
    names = []
    for name, _ in model.named_parameters():
        if _is_adapter(name):
            continue
        clean = vllm_name(name)
        if modules is None or module_of(clean) in modules:
            names.append(clean)
    return names


def _lora_layers(model: torch.nn.Module) -> dict[str, Any]:
    """``{module path in model.named_modules(): LoRA layer}`` for a PEFT model (empty otherwise)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # pragma: no cover - peft is a dependency
        return {}
    return {path: m for path, m in model.named_modules() if isinstance(m, LoraLayer)}


def merged_weight(layer: Any) -> torch.Tensor:
    """``W + sum of the active adapters' scaling * B @ A`` as a new tensor; the base weight is not written."""
    base = layer.get_base_layer().weight
    weight = base.detach()
    if getattr(layer, "merged", False):  # merged in place by someone else: the base already holds it
        return weight.clone()
    delta = None
    for adapter in layer.active_adapters:
        if adapter in getattr(layer, "lora_A", {}):
            d = layer.get_delta_weight(adapter)
            delta = d if delta is None else delta + d
    return weight.clone() if delta is None else weight + delta.to(weight.dtype)


def iter_sync_tensors(
    model: torch.nn.Module, gather: GatherFn | None = None, full: bool = False
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(engine name, tensor)`` of a sync, one at a time (see the module docstring).

    ``gather(params)`` is a context manager that materialises sharded parameters (TRL's
    ``DistributedBackend.gather_params``; every rank must call it in the same order, which this iteration
    guarantees since it depends only on the model's structure). LoRA layers yield their merged weight (a
    new tensor); other tensors are the live parameter data, valid until the next ``gather``.
    """
    gather = gather or (lambda params: contextlib.nullcontext())
    model_type = str(getattr(getattr(model, "config", None), "model_type", ""))
    modules = None if full else sync_modules(model)
    lora = _lora_layers(model)
    inside: tuple[str, ...] = ()  # paths of LoRA layers already sent: their internals are not walked
    seen: set[int] = set()  # tied weights (an embedding reused as lm_head) are sent once
    # One pass in module order, so vLLM completes (and frees) each layer before the next one starts.
    for path, module in model.named_modules():
        if inside and path.startswith(inside):
            continue
        if path in lora:
            inside = (*inside, path + ".")
            name = vllm_name(path)
            if modules is not None and name not in modules:
                continue
            layer, base = module, module.get_base_layer()
            with gather(list(layer.parameters())):
                yield f"{name}.weight", merged_weight(layer)
                if getattr(base, "bias", None) is not None:
                    yield f"{name}.bias", base.bias.detach()
            continue
        for param_name, param in module.named_parameters(recurse=False):
            full_name = f"{path}.{param_name}" if path else param_name
            if id(param) in seen or _is_adapter(full_name):
                continue
            seen.add(id(param))
            clean = vllm_name(full_name)
            if modules is not None and module_of(clean) not in modules:
                continue
            with gather([param]):
                # vLLM loads what a published checkpoint holds (Qwen3-VL-MoE experts: transposed)
                yield clean, to_hub(model_type, clean, param.data)
