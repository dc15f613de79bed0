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
