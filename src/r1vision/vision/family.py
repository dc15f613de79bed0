"""The supported model families and what each one fixes: patch geometry and the box coordinate frame.

This is the one table of family facts; the pixel budget, the box conventions of the tasks, the tiny-model
builder and the vLLM compatibility layer read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FamilyInfo:
    """Facts about one Qwen-VL family.

    ``patch_size``/``merge_size``: the vision tower cuts ``patch_size`` pixel patches and merges
    ``merge_size``² of them into one token. ``box_frame``: the coordinates grounding answers use —
    ``norm1000`` (0-1000 on both axes) or ``pixels`` (of the resized image), per the Qwen reports.
    """

    name: str
    patch_size: int
    merge_size: int
    box_frame: str

    @property
    def factor(self) -> int:
        """Image sides are multiples of this many pixels (one token per ``factor``² pixels)."""
        return self.patch_size * self.merge_size


FAMILIES: dict[str, FamilyInfo] = {
    f.name: f
    for f in (
        FamilyInfo("qwen2_vl", 14, 2, "norm1000"),
        FamilyInfo("qwen2_5_vl", 14, 2, "pixels"),
        FamilyInfo("qwen3_vl", 16, 2, "norm1000"),
        # Qwen3-VL's MoE sizes (30B-A3B, 235B-A22B): the same vision tower and box frame as Qwen3-VL.
        FamilyInfo("qwen3_vl_moe", 16, 2, "norm1000"),
        # Qwen3.5 (dense and MoE): a Qwen3-VL-style tower (16 px patches, 2x2 merge) before a hybrid text
        # stack (3 gated-delta-net "linear attention" layers per full-attention layer).
        FamilyInfo("qwen3_5", 16, 2, "norm1000"),
        FamilyInfo("qwen3_5_moe", 16, 2, "norm1000"),
    )
}

# Families whose text stack is a mixture of experts: LoRA leaves their routers and routed experts alone
# (see LM_LINEAR_NAMES) and the memory estimate counts total and active parameters apart.
MOE_FAMILIES = frozenset({"qwen3_vl_moe", "qwen3_5_moe"})

# The language model's linear layers that ``lora_target_modules: all-linear-lm`` adapts, by module name:
# attention and MLP projections (in MoE models the shared expert's; routed experts are fused 3-D tensors,
# not linear modules) and Qwen3.5's gated-delta-net projections. Routers (``mlp.gate``,
# ``shared_expert_gate``) and the per-head decay/beta gates (``in_proj_a``/``in_proj_b``) are left out.
LM_LINEAR_NAMES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "in_proj_qkv",
    "in_proj_z",
    "out_proj",
)

# The box frame of each family (the one fact SGG's box convention reads).
FAMILY_BOX_FRAME = {name: f.box_frame for name, f in FAMILIES.items()}


def model_family_or_none(config: Any) -> str | None:
    """:func:`model_family`, or ``None`` for a model outside the Qwen-VL families (trained as stock TRL would)."""
    try:
        return model_family(config)
    except ValueError:
        return None


def model_family(config: Any) -> str:
    """The family (a key of :data:`FAMILIES`) from a model config (or its ``model_type``)."""
    model_type = config if isinstance(config, str) else getattr(config, "model_type", "")
    # Longest names first: "qwen2_5_vl" must not be read as "qwen2_vl" by a prefix test.
    for family in sorted(FAMILIES, key=len, reverse=True):
        if model_type.startswith(family):
            return family
    raise ValueError(
        f"model type {model_type!r} is not a supported vision-language family ({', '.join(FAMILIES)})"
    )


def model_family_of(model: str) -> str:
    """The family of a model folder or Hub id: ``config.json``'s ``model_type`` (read without transformers
    for local folders, so commands can decide before the heavy imports)."""
    import json
    from pathlib import Path

    config = Path(model).expanduser() / "config.json"
    if config.is_file():
        return model_family(str(json.loads(config.read_text()).get("model_type", "")))
    from transformers import AutoConfig

    return model_family(AutoConfig.from_pretrained(model))


# Vision parts by name: Qwen-VL's ``visual`` (tower and merger); the towers and projectors of LLaVA(-NeXT),
# Gemma 3 (``vision_tower``, ``multi_modal_projector``), Idefics3 / SmolVLM (``vision_model``, ``connector``),
# and LLaVA-NeXT's learned ``image_newline`` separator.
_VISION_PARTS = (".visual.", ".vision_tower.", ".vision_model.", ".multi_modal_projector.", ".connector.")


def is_vision_param(name: str) -> bool:
    """True for parameters of the vision tower, its projector or connector and the image-layout parameters
    of each family (see ``_VISION_PARTS``): what ``freeze_vision_tower`` freezes."""
    dotted = f".{name}"
    return any(part in dotted for part in _VISION_PARTS) or dotted.endswith(".image_newline")
