"""Qwen3-VL-MoE's experts on disk are in the published layout (what vLLM loads), whoever writes them:
the tiny-model builder, a trainer's final folder, the LoRA merge; transformers reads both layouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForImageTextToText

from r1vision.vision.hub_layout import is_transposed, write_hub_layout

GATE_UP = "model.language_model.layers.0.mlp.experts.gate_up_proj"
DOWN = "model.language_model.layers.0.mlp.experts.down_proj"


def _shapes(folder) -> dict[str, tuple[int, ...]]:
    out = {}
    for shard in folder.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            out |= {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    return out


def test_tiny_moe_is_published_layout_and_loads_back_exactly(tiny_model, tmp_path):
    path = Path(tiny_model("qwen3_vl_moe"))
    model = AutoModelForImageTextToText.from_pretrained(path)
    text = model.config.text_config
    experts, hidden, inter = text.num_experts, text.hidden_size, text.moe_intermediate_size
    # published: (E, hidden, 2 x inter) and (E, inter, hidden); in memory the last two dims swapped
    assert _shapes(path)[GATE_UP] == (experts, hidden, 2 * inter)
    assert _shapes(path)[DOWN] == (experts, inter, hidden)
    live = dict(model.named_parameters())
    assert tuple(live[GATE_UP].shape) == (experts, 2 * inter, hidden)

    # transformers 5.23 saves the in-memory layout; the rewrite restores the published one, and only it
    model.save_pretrained(tmp_path / "saved")
    assert _shapes(tmp_path / "saved")[GATE_UP] == (experts, 2 * inter, hidden)
    assert write_hub_layout(tmp_path / "saved") == 2 * text.num_hidden_layers
    assert _shapes(tmp_path / "saved") == _shapes(path)
    assert write_hub_layout(tmp_path / "saved") == 0  # idempotent
    again = dict(AutoModelForImageTextToText.from_pretrained(tmp_path / "saved").named_parameters())
    assert all(torch.equal(again[n], p) for n, p in live.items())


def test_other_families_are_left_alone(tiny_model, tmp_path):
    shutil.copytree(tiny_model("qwen3_5_moe"), tmp_path / "m")
    before = (tmp_path / "m" / "model.safetensors").read_bytes()
    assert write_hub_layout(tmp_path / "m") == 0
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == before
    assert not is_transposed("qwen3_5_moe", GATE_UP) and is_transposed("qwen3_vl_moe", GATE_UP)


@pytest.mark.parametrize("lora", [False, True])
def test_trainer_final_folder_is_published_layout(tiny_model, color_dir, tmp_path, lora):
    """A full fine-tune's final folder, and a LoRA run's merged model, hold the experts as vLLM loads them."""
    from r1vision.trainer.grpo import VisionGRPOTrainer
    from tests.helpers.tasks import task_rows
    from tests.helpers.training import grpo_args, varied_reward

    args = grpo_args(tmp_path / "run", max_steps=1, lora_r=4 if lora else 0)
    rows = task_rows("color", color_dir).remove_columns(["completion"])
    trainer = VisionGRPOTrainer(tiny_model("qwen3_vl_moe"), [varied_reward], args=args, train_dataset=rows)
    trainer.train()
    trainer.save_model(str(tmp_path / "out"))
    folder = tmp_path / "out" / ("merged" if lora else "")
    text = trainer.model.config.text_config
    shape = _shapes(folder)[GATE_UP]
    assert shape == (text.num_experts, text.hidden_size, 2 * text.moe_intermediate_size)
