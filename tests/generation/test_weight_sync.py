"""What a vLLM weight sync sends (no vLLM needed): whole fused groups, LoRA merged per module out of place
(exact values, no drift of a bf16 base), one layer gathered at a time, everything once with ``full``."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from r1vision.generation.weight_sync import (
    fused_groups,
    iter_sync_tensors,
    module_of,
    sync_param_names,
)


def _lora_model(tiny_model, targets, dtype=torch.float32):
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from r1vision.trainer.setup import lora_config

    model = AutoModelForImageTextToText.from_pretrained(tiny_model("qwen2_vl"), dtype=dtype)
    peft_model = get_peft_model(model, lora_config(4, 8, 0.0, targets))
    torch.manual_seed(0)
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:  # peft starts B at zero: make the adapters do something
            torch.nn.init.normal_(param, std=0.2)
    return peft_model


def test_fused_groups_complete_every_projection_family():
    got = fused_groups(
        {"m.layers.0.self_attn.q_proj", "m.layers.0.mlp.up_proj", "m.layers.1.self_attn.o_proj"}
    )
    assert got == {
        "m.layers.0.self_attn.q_proj", "m.layers.0.self_attn.k_proj", "m.layers.0.self_attn.v_proj",
        "m.layers.0.mlp.gate_proj", "m.layers.0.mlp.up_proj", "m.layers.1.self_attn.o_proj",
    }  # fmt: skip


def test_lora_subset_sends_whole_fused_groups_with_exact_merged_values(tiny_model):
    """LoRA on q_proj and v_proj: vLLM's fused qkv_proj must get k too, or its reload keeps garbage rows."""
    model = _lora_model(tiny_model, ["q_proj", "v_proj"])
    sent = dict(iter_sync_tensors(model))
    assert list(sent) == sync_param_names(model)  # the names are known before anything is materialised
    layers = {module_of(module_of(n)) for n in sent}
    for layer in layers:
        for proj in ("q_proj", "k_proj", "v_proj"):
            assert f"{layer}.{proj}.weight" in sent and f"{layer}.{proj}.bias" in sent
    assert not any("lora_" in n or "base_layer" in n or "visual" in n for n in sent)
    reference = copy.deepcopy(model).merge_and_unload().state_dict()  # peft's own merge
    for name, tensor in sent.items():
        assert torch.allclose(tensor, reference[name], atol=1e-6), name
    q = "model.language_model.layers.0.self_attn.q_proj.weight"
    base = model.get_base_model().state_dict()[q.replace("q_proj.weight", "q_proj.base_layer.weight")]
    assert not torch.equal(sent[q], base)  # the adapter is in the merged value


def test_bf16_base_never_drifts(tiny_model):
    """TRL's in-place merge/unmerge drifts a bf16 base (W += d; W -= d rounds); the out-of-place merge
    leaves it bit-identical after any number of syncs."""
    model = _lora_model(tiny_model, ["q_proj", "v_proj"], dtype=torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}
    for _ in range(50):
        for _name, _tensor in iter_sync_tensors(model):
            pass
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters() if n in before)
    drift = copy.deepcopy(model)  # what the in-place path does to the same weights
    for _ in range(50):
        drift.merge_adapter()
        drift.unmerge_adapter()
    moved = [n for n, p in drift.named_parameters() if n in before and not torch.equal(before[n], p)]
    assert moved, "the in-place path should show the drift this avoids"


def test_one_layer_gathered_at_a_time_and_full_sync_sends_everything_once(tiny_model):
    model = _lora_model(tiny_model, ["q_proj", "v_proj"])
    sizes = []

    @contextlib.contextmanager
    def gather(params):
        sizes.append(sum(p.numel() for p in params))
        yield

    names = [n for n, _ in iter_sync_tensors(model, gather)]
    one_layer = max(
        sum(p.numel() for p in m.parameters()) for _, m in model.named_modules() if hasattr(m, "lora_A")
    )
    assert max(sizes) <= one_layer  # never the whole model (TRL gathered every parameter at once)
    assert len(sizes) <= len(names)
    full = [n for n, _ in iter_sync_tensors(model, full=True)]
    base_names = {n for n in model.get_base_model().state_dict() if "lora_" not in n}
    assert len(full) == len(set(full))  # tied weights once
    assert {n.replace(".base_layer", "") for n in base_names} >= set(full)
    assert any("visual" in n for n in full) and not any("visual" in n for n in names)


@pytest.mark.parametrize("targets", [["all-linear-lm"], ["gate_proj"]])
def test_partial_sync_covers_what_changes(tiny_model, targets):
    model = _lora_model(tiny_model, targets)
    names = sync_param_names(model)
    if targets == ["gate_proj"]:
        assert any(n.endswith("mlp.up_proj.weight") for n in names)  # gate brings up (gate_up_proj)
        assert not any("self_attn" in n for n in names)
