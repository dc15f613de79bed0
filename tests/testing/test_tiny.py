"""Tiny offline models: load with the Auto classes, real processor, deterministic for a seed."""

import json

import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from r1vision.testing.tiny import make_tiny_model

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"]


@pytest.mark.parametrize("family", FAMILIES)
def test_loads_with_auto_classes_and_generates(tiny_model, family):
    path = tiny_model(family)
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    assert model.config.model_type == family
    # An image-only processor (not just a tokenizer) even though torchvision is absent.
    from r1vision.vision.video_processor import QwenVideoProcessor

    # transformers' video processors need torchvision: the processor carries r1vision's torch-only one.
    assert hasattr(processor, "image_processor") and isinstance(processor.video_processor, QwenVideoProcessor)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|vision_start|><|image_pad|><|vision_end|>" in text
    inputs = processor(text=[text], images=[Image.new("RGB", (112, 84), "red")], return_tensors="pt")
    merge = processor.image_processor.merge_size
    n_tokens = int(inputs["image_grid_thw"].prod()) // merge**2
    assert (inputs["input_ids"] == model.config.image_token_id).sum() == n_tokens
    out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 3 or out[0, -1] == processor.tokenizer.eos_token_id


def test_same_seed_same_weights_other_seed_differs(tmp_path):
    a = make_tiny_model("qwen2_vl", tmp_path / "a", seed=3)
    b = make_tiny_model("qwen2_vl", tmp_path / "b", seed=3)
    c = make_tiny_model("qwen2_vl", tmp_path / "c", seed=4)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_size_options_change_the_model(tmp_path):
    path = make_tiny_model("qwen2_vl", tmp_path / "m", hidden=32, layers=1, heads=2)
    config = json.loads((path / "config.json").read_text())
    assert config["text_config"]["hidden_size"] == 32 and config["text_config"]["num_hidden_layers"] == 1


def test_stock_processor_name_loads_without_torchvision(tiny_model, tmp_path):
    """Hub checkpoints name the stock class; AutoProcessor must still give the image-only one."""
    import shutil

    src = tiny_model("qwen2_5_vl")
    dst = tmp_path / "hub_like"
    shutil.copytree(src, dst)
    cfg_path = dst / "processor_config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["processor_class"] == "Qwen2_5_VLProcessor"  # we save the standard name
    processor = AutoProcessor.from_pretrained(dst)
    assert type(processor).__name__ == "ImageOnlyQwen2_5_VLProcessor"
    ids = processor.tokenizer("<|image_pad|>")["input_ids"]
    assert len(ids) == 1 and torch.tensor(ids).item() == processor.image_token_id
