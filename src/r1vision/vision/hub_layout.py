"""Tensors that transformers keeps in another layout than the published checkpoints, and the way back.

transformers 5 fuses Qwen3-VL-MoE's routed experts as ``(experts, 2 x moe_intermediate, hidden)`` and
``(experts, hidden, moe_intermediate)``; the published checkpoints (and vLLM's loader, which transposes
them itself) have the last two dimensions the other way round. Its conversion mapping transposes on load,
but ``save_pretrained`` (5.23) writes the in-memory layout, so a fine-tuned Qwen3-VL-MoE saved as is cannot
be served by vLLM (``RuntimeError: The size of tensor a ... must match``). r1vision writes final folders
and tiny models in the published layout and sends the weight sync in it.

transformers' loader accepts both layouts: it transposes a tensor only when its shape differs from the
model's. A square expert tensor is ambiguous and loads untransposed, which is why the tiny MoE models
avoid ``2 x moe_intermediate == hidden``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# model_type -> parameter-name suffixes stored with their last two dimensions swapped
TRANSPOSED: dict[str, tuple[str, ...]] = {
    "qwen3_vl_moe": (".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"),
}


def transposed_names(model_type: str) -> tuple[str, ...]:
    """The parameter-name suffixes of ``model_type`` whose published layout is transposed (often none)."""
    return TRANSPOSED.get(model_type, ())


def is_transposed(model_type: str, name: str) -> bool:
    """Whether parameter ``name`` of a ``model_type`` model is stored transposed in published checkpoints."""
    return any(name.endswith(suffix) for suffix in transposed_names(model_type))


def to_hub(model_type: str, name: str, tensor: Any) -> Any:
    """``tensor`` (transformers' in-memory layout) in the published layout: a transposed view or itself."""
    return tensor.transpose(-2, -1) if is_transposed(model_type, name) else tensor


def write_hub_layout(folder: str | os.PathLike[str]) -> int:
    """Rewrite the safetensors shards of a saved model in the published layout; return the tensors changed.

    The in-memory layout is recognised from ``config.json`` (hidden and expert widths), so a folder already
    in the published layout, or another family, is left as it is. Each shard is replaced atomically.
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        return 0
    config = json.loads(config_path.read_text())
    suffixes = transposed_names(str(config.get("model_type", "")))
    if not suffixes:
        return 0
    text = config.get("text_config", config)
    hidden, inter = int(text["hidden_size"]), int(text["moe_intermediate_size"])
    # in-memory shapes (without the expert dimension) of each transposed tensor
    in_memory = {".mlp.experts.gate_up_proj": (2 * inter, hidden), ".mlp.experts.down_proj": (hidden, inter)}
    from safetensors import safe_open
    from safetensors.torch import save_file

    changed = 0
    for shard in sorted(folder.glob("*.safetensors")):
        tensors, metadata, touched = {}, None, 0
        with safe_open(str(shard), "pt") as f:
            metadata = f.metadata()
            for key in f.keys():
                tensor = f.get_tensor(key)
                suffix = next((s for s in suffixes if key.endswith(s)), None)
                if suffix and tuple(tensor.shape[-2:]) == in_memory[suffix] != in_memory[suffix][::-1]:
                    tensor = tensor.transpose(-2, -1).contiguous()
                    touched += 1
                tensors[key] = tensor
        if touched:
            tmp = shard.with_name(shard.name + ".tmp")
            save_file(tensors, str(tmp), metadata=metadata or {"format": "pt"})
            os.replace(tmp, shard)
            changed += touched
    return changed
