"""What can reach vLLM as a LoRA adapter (``vllm_lora_adapters``), checked before training; the push itself
runs against a real engine in tests/generation/test_vllm_colocate.py."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForImageTextToText

from r1vision.generation.lora_push import adapter_problems, engine_lora_rank
from r1vision.trainer.setup import freeze_vision_tower, lora_config


def _peft(path: str, target="all-linear-lm", **extra):
    from peft import get_peft_model

    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    return get_peft_model(model, lora_config(8, 16, 0.0, target, **extra))


def test_engine_rank_is_the_smallest_vllm_accepts():
    assert [engine_lora_rank(r) for r in (1, 2, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(ValueError, match="above vLLM's largest"):
        engine_lora_rank(1024)


def test_only_language_model_adapters_can_travel(tiny_model):
    path = tiny_model("qwen2_vl")
    assert adapter_problems(_peft(path)) == []  # all-linear-lm: language model only, nothing else trained
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert adapter_problems(model) == ["vllm_lora_adapters needs LoRA (set lora_r or use_peft)"]
    (dora,) = adapter_problems(_peft(path, use_dora=True))
    assert "use_dora" in dora
    # r1vision's own targets never reach the vision tower; a peft_config a user passes may
    from peft import LoraConfig, get_peft_model

    user = LoraConfig(r=8, lora_alpha=16, target_modules=["qkv", "q_proj"])  # qkv: the vision attention
    vision = adapter_problems(get_peft_model(AutoModelForImageTextToText.from_pretrained(path), user))
    assert len(vision) == 1 and "vision tower" in vision[0]
    trained = _peft(path)
    for name, param in trained.named_parameters():
        if "visual" in name:
            param.requires_grad_(True)  # a fully trained vision tower next to the adapters
    (outside,) = adapter_problems(trained)
    assert "are not LoRA adapters" in outside and "visual" in outside
    freeze_vision_tower(trained)
    assert adapter_problems(trained) == []
