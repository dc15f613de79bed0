"""LoRA targets and the frozen vision parts, found from each family's own module names (meta device: the
published layouts at no memory). Idefics3 / SmolVLM name their language model ``text_model`` (r1vision's
``lora_r`` failed there with peft's NoMatchingPeftModuleError), and ``freeze_vision_tower`` left Idefics3's
connector and LLaVA-NeXT's ``image_newline`` trainable."""

from __future__ import annotations

import re

import pytest
import torch

from r1vision.trainer.setup import freeze_vision_tower, lora_config

VISION = re.compile(r"visual|vision_tower|vision_model|multi_modal_projector|connector|image_newline")


def _meta(config_name: str, **kwargs):
    import transformers

    config = getattr(transformers, config_name)(**kwargs)
    with torch.device("meta"):
        return transformers.AutoModelForImageTextToText.from_config(config)


@pytest.mark.parametrize(
    "config_name", ["Idefics3Config", "LlavaNextConfig", "Gemma3Config", "Qwen2VLConfig"]
)
def test_all_linear_lm_targets_the_language_model_only(config_name):
    model = _meta(config_name)
    pattern = lora_config(8, 16, 0.0, "all-linear-lm").target_modules
    hits = [n for n, _ in model.named_modules() if re.fullmatch(pattern, n)]
    assert hits, f"no language-model projection matched in {config_name}"
    assert not [n for n in hits if VISION.search(n)]


@pytest.mark.parametrize(
    ("config_name", "parts"),
    [("Idefics3Config", ["connector"]), ("LlavaNextConfig", ["image_newline", "multi_modal_projector"])],
)
def test_freeze_vision_tower_freezes_the_tower_and_its_connector(config_name, parts):
    model = _meta(config_name)
    freeze_vision_tower(model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    for part in parts:
        assert any(part in n for n in frozen) and not any(part in n for n in trainable), part
    assert trainable and not [n for n in trainable if VISION.search(n)]


# The published layouts of the newest Qwen families (transformers' defaults are Qwen3.5-27B, Qwen3.5-35B-A3B
# and Qwen3-VL-30B-A3B), built on the meta device.
NEW_QWEN = ["Qwen3_5Config", "Qwen3_5MoeConfig", "Qwen3VLMoeConfig"]


@pytest.mark.parametrize("config_name", NEW_QWEN)
def test_new_qwen_lora_targets_leave_routers_experts_and_gates(config_name):
    model = _meta(config_name)
    pattern = lora_config(8, 16, 0.0, "all-linear-lm").target_modules
    hits = [n for n, _ in model.named_modules() if re.fullmatch(pattern, n)]
    kinds = {n.rsplit(".", 1)[-1] for n in hits}
    assert not [n for n in hits if VISION.search(n)]
    # routers (mlp.gate: a parameter, not a Linear, in transformers 5; shared_expert_gate: Linear(h, 1)),
    # the gated-delta-net decay/beta gates and the fused routed experts stay without adapters
    assert not kinds & {"gate", "shared_expert_gate", "in_proj_a", "in_proj_b", "experts", "lm_head"}
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= kinds
    if config_name.startswith("Qwen3_5"):
        # 3 of 4 layers are linear attention: without their projections LoRA would skip most mixing layers
        assert {"in_proj_qkv", "in_proj_z", "out_proj"} <= kinds
        layers = model.config.text_config.num_hidden_layers
        assert sum(n.endswith("linear_attn.in_proj_qkv") for n in hits) == layers * 3 // 4
    if config_name == "Qwen3_5MoeConfig":  # the shared expert is a plain MLP: adapted
        assert any(".shared_expert.gate_proj" in n for n in hits)
    if config_name == "Qwen3VLMoeConfig":  # every MLP is routed: attention-only adapters
        assert not kinds & {"gate_proj", "up_proj", "down_proj"}


@pytest.mark.parametrize("config_name", NEW_QWEN)
def test_new_qwen_freeze_vision_tower_freezes_visual_only(config_name):
    model = _meta(config_name)
    frozen = freeze_vision_tower(model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert frozen and all(".visual." not in f".{n}" for n in trainable)
    assert all(".visual." in f".{n}" for n, p in model.named_parameters() if not p.requires_grad)


def test_moe_experts_take_lora_through_target_parameters(tiny_model):
    """Routed experts are fused 3-D tensors: ``lora_target_parameters`` (peft ``target_parameters``) is the
    way to adapt them, as the docs say; the default leaves them frozen."""
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    path = tiny_model("qwen3_5_moe")
    default = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(path), lora_config(4, 8, 0.0, "all-linear-lm")
    )
    names = [n for n, p in default.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names) and not [n for n in names if "experts" in n]
    experts = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(path),
        lora_config(4, 8, 0.0, "all-linear-lm", target_parameters=["mlp.experts.gate_up_proj"]),
    )
    expert_lora = [n for n, p in experts.named_parameters() if p.requires_grad and "experts" in n]
    assert expert_lora and all("lora_" in n for n in expert_lora)
