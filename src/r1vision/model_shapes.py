"""Model shapes for the memory estimates: exact parameter counts from a config, built on the ``meta``
device (no weights, no download), and the built-in published shapes under ``r1vision/data/model_shapes``
(Qwen2-VL-2B/7B, Qwen2.5-VL-3B/7B, Qwen3-VL-4B/8B, Qwen3-VL-30B-A3B, Qwen3.5-0.8B, Qwen3.6-35B-A3B),
usable offline. :mod:`r1vision.estimate` turns a shape and a training setup into bytes per GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from r1vision.vision.family import LM_LINEAR_NAMES, is_vision_param

SHAPE_ALIASES = {
    "qwen/qwen2-vl-2b-instruct": "qwen2-vl-2b",
    "qwen/qwen2-vl-7b-instruct": "qwen2-vl-7b",
    "qwen/qwen2.5-vl-3b-instruct": "qwen2.5-vl-3b",
    "qwen/qwen2.5-vl-7b-instruct": "qwen2.5-vl-7b",
    "qwen/qwen3-vl-4b-instruct": "qwen3-vl-4b",
    "qwen/qwen3-vl-8b-instruct": "qwen3-vl-8b",
    "qwen/qwen3-vl-30b-a3b-instruct": "qwen3-vl-30b-a3b",
    "qwen/qwen3.5-0.8b": "qwen3.5-0.8b",
    "qwen/qwen3.6-35b-a3b": "qwen3.6-35b-a3b",
}


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs to know about a model; counts are numbers of parameters (elements)."""

    name: str
    total_params: int
    vision_params: int
    lora_in_out: int  # sum of (in + out) features over LoRA's target linears: LoRA rank r adds r * this
    largest_block_params: int  # the biggest decoder/vision block
    hidden: int
    layers: int
    intermediate: int
    kv_dim: int  # num_key_value_heads * head_dim
    vocab: int
    vision_hidden: int
    vision_layers: int
    vision_intermediate: int
    patch_size: int
    merge_size: int = 2
    largest_layer_params: int = 0  # DeepSpeed's "largest layer": the module with most direct params
    lm_head_params: int = 0  # 0 when tied to the embedding
    # Mixture of experts: parameters one token runs through (0: all, a dense model), and the routed experts
    active_params: int = 0
    experts: int = 0
    experts_per_token: int = 0
    # Hybrid stacks (Qwen3.5): decoder layers with a KV cache (0: all), and the fixed per-sequence state of
    # the others (gated delta net: fp32 recurrent state + the causal convolution's window)
    kv_layers: int = 0
    state_bytes_per_seq: int = 0

    def kv_bytes(self, tokens: int, sequences: int) -> int:
        """A bf16 KV cache of ``tokens`` tokens over ``sequences`` sequences, linear-attention states included."""
        return (
            2 * (self.kv_layers or self.layers) * self.kv_dim * 2 * tokens
            + self.state_bytes_per_seq * sequences
        )


def builtin_shapes() -> list[str]:
    """Names of the built-in model shapes (usable offline as ``--model``)."""
    folder = resources.files("r1vision") / "data" / "model_shapes"
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def _builtin_config(name: str) -> dict[str, Any] | None:
    key = SHAPE_ALIASES.get(name.lower(), name.lower())
    path = resources.files("r1vision") / "data" / "model_shapes" / f"{key}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    data.setdefault("_name_or_path", data.pop("_name", key))
    return data


def load_model_config(model: str) -> Any:
    """A transformers config from a folder, a ``config.json`` path, a built-in shape name or the Hub."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    path = Path(model)
    if path.is_file():
        data = json.loads(path.read_text())
    elif (path / "config.json").is_file():
        data = json.loads((path / "config.json").read_text())
    else:
        data = _builtin_config(model)
        if data is None:  # a Hub id: needs the network or a warm cache
            return AutoConfig.from_pretrained(model)
    data = {k: v for k, v in data.items() if k not in ("_name", "architectures")}
    name = data.pop("_name_or_path", model)
    config = CONFIG_MAPPING[data.pop("model_type")](**data)
    config._name_or_path = name
    return config


def shape_of(config: Any) -> ModelShape:
    """Count parameters by building the model on the ``meta`` device (exact, no memory, no weights)."""
    import torch
    from torch import nn
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    total = sum(p.numel() for p in model.parameters())  # parameters() counts tied weights once
    vision = sum(p.numel() for n, p in model.named_parameters() if is_vision_param(n))
    lora_in_out = 0
    largest = largest_layer = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not is_vision_param(name):
            if name.rsplit(".", 1)[-1] in LM_LINEAR_NAMES:
                lora_in_out += module.in_features + module.out_features
        if isinstance(module, nn.ModuleList):
            for block in module:
                largest = max(largest, sum(p.numel() for p in block.parameters()))
        largest_layer = max(largest_layer, sum(p.numel() for p in module.parameters(recurse=False)))
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    lm_head = 0 if head is None or tied else head.weight.numel()
    text = config.get_text_config()
    vc = config.vision_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    intermediate = getattr(text, "intermediate_size", 0) or 0
    # Routed experts (transformers 5 fuses each layer's experts into one ``experts`` module of 3-D tensors):
    # a token runs through k of E, so per token k/E of them are active and the MLP is k experts wide.
    n_experts, top_k = getattr(text, "num_experts", 0) or 0, getattr(text, "num_experts_per_tok", 0) or 0
    active = 0
    if n_experts and top_k:
        routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in f".{n}")
        active = total - routed + routed * top_k // n_experts
        intermediate = top_k * text.moe_intermediate_size + (
            getattr(text, "shared_expert_intermediate_size", 0) or 0
        )
    layer_types = list(getattr(text, "layer_types", None) or [])
    kv_layers = sum(t == "full_attention" for t in layer_types) if "linear_attention" in layer_types else 0
    state = 0
    if kv_layers:  # gated delta net: fp32 (num_v_heads, k_dim, v_dim) state + bf16 conv window per layer
        k_dim, v_dim = text.linear_key_head_dim, text.linear_value_head_dim
        conv_channels = 2 * text.linear_num_key_heads * k_dim + text.linear_num_value_heads * v_dim
        per_layer = (
            4 * text.linear_num_value_heads * k_dim * v_dim + 2 * conv_channels * text.linear_conv_kernel_dim
        )
        state = per_layer * (len(layer_types) - kv_layers)
    vision_hidden = getattr(vc, "embed_dim", None) or vc.hidden_size  # Qwen2-VL names its width embed_dim
    vision_inter = getattr(vc, "intermediate_size", None) or int(vision_hidden * getattr(vc, "mlp_ratio", 4))
    return ModelShape(
        name=str(getattr(config, "_name_or_path", "") or config.model_type),
        total_params=total,
        vision_params=vision,
        lora_in_out=lora_in_out,
        largest_block_params=largest,
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        intermediate=intermediate,
        kv_dim=text.num_key_value_heads * head_dim,
        vocab=text.vocab_size,
        vision_hidden=vision_hidden,
        vision_layers=vc.depth,
        vision_intermediate=vision_inter,
        patch_size=vc.patch_size,
        merge_size=vc.spatial_merge_size,
        largest_layer_params=largest_layer,
        lm_head_params=lm_head,
        active_params=active,
        experts=n_experts if active else 0,
        experts_per_token=top_k if active else 0,
        kv_layers=kv_layers,
        state_bytes_per_seq=state,
    )
