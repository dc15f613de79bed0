"""``r1vision estimate-memory``: exact parameter counts and memory arithmetic that can be checked by hand."""

from __future__ import annotations

import json

import pytest

from r1vision.cli import main
from r1vision.estimate import (
    GIB,
    ModelShape,
    TrainSetup,
    builtin_shapes,
    estimate,
    image_tokens,
    load_model_config,
    shape_of,
)

# A made-up model with round numbers: 1e9 params, 1e8 of them vision; h=1000, kv=200, I=3000, vocab 10 000.
SHAPE = ModelShape(
    name="round",
    total_params=1_000_000_000,
    vision_params=100_000_000,
    lora_in_out=1_000_000,
    largest_block_params=10_000_000,
    hidden=1000,
    layers=10,
    intermediate=3000,
    kv_dim=200,
    vocab=10_000,
    vision_hidden=100,
    vision_layers=2,
    vision_intermediate=400,
    patch_size=14,
    merge_size=2,
)


def _setup(**kw) -> TrainSetup:
    base = dict(gpus=8, batch=1, prompt_tokens=100, completion_tokens=100, max_pixels=28 * 28 * 100)
    base.update(kw)
    return TrainSetup(**base)


def test_zero3_full_finetune_states_are_sharded_18_bytes_per_param():
    e = estimate(SHAPE, _setup(zero=3))
    assert e.weights == 2e9 / 8 == 250_000_000
    assert e.gradients == 4e9 / 8  # the fp32 gradient partition
    assert e.optimizer == 12e9 / 8 == 1_500_000_000
    assert e.gathered == 4 * 10_000_000  # DeepSpeed's 4 B x largest layer (no largest_layer: the block)
    assert e.trainable_params == 1_000_000_000
    assert e.reference == 0


def test_zero2_replicates_weights_and_offload_moves_states_to_cpu():
    e = estimate(SHAPE, _setup(zero=2))
    assert (e.weights, e.gradients, e.optimizer, e.gathered) == (2e9, 6e9 / 8, 1.5e9, 0)
    off = estimate(SHAPE, _setup(zero=2, offload=True))
    assert off.optimizer == 0 and off.gradients == 0 and off.weights == 2e9 and off.cpu_offload == 18e9
    off3 = estimate(SHAPE, _setup(zero=3, offload=True))
    assert off3.weights == 0 and off3.cpu_offload == 16e9 + 2e9 and off3.model_states == 4e7


def test_fsdp2_shards_fp32_masters_under_bf16_and_gathers_the_root_and_two_blocks(capsys):
    """FSDP2 under bf16 mixed precision (the GPU default): accelerate upcasts the trainable parameters to
    fp32 masters, so weight 4 B + gradient 4 B + AdamW 8 B, all sharded over the GPUs (16/N, no DDP bucket
    copy); the root unit (embedding) and two blocks gathered in bf16 for compute. Without mixed precision
    the states stay in the load dtype (bf16 here: 2 + 2 + 4 B). Frozen parameters keep the load dtype."""
    e = estimate(SHAPE, _setup(zero=0, fsdp=True, beta=0.04))
    assert (e.weights, e.gradients, e.optimizer, e.reference) == (4e9 / 8, 4e9 / 8, 8e9 / 8, 2e9 / 8)
    assert e.gathered == 2 * (10_000 * 1000 + 2 * 10_000_000)
    z3 = estimate(SHAPE, _setup(zero=3, beta=0.04))
    assert e.weights + e.gradients + e.optimizer == 16e9 / 8 < z3.weights + z3.gradients + z3.optimizer
    plain = estimate(SHAPE, _setup(zero=0, fsdp=True, beta=0.04, bf16_autocast=False))
    assert (plain.weights, plain.gradients, plain.optimizer) == (2e9 / 8, 2e9 / 8, 4e9 / 8)
    frozen = estimate(SHAPE, _setup(zero=0, fsdp=True, freeze_vision=True))  # the tower: bf16, no states
    assert (
        frozen.weights == (4 * 900_000_000 + 2 * 100_000_000) // 8
        and frozen.optimizer == 8 * 900_000_000 // 8
    )
    lora = estimate(SHAPE, _setup(zero=0, fsdp=True, lora_r=8))  # fp32 adapters, bf16 base
    assert lora.weights == (4 * 8_000_000 + 2 * 1_000_000_000) // 8
    one = estimate(SHAPE, _setup(gpus=1, zero=0, fsdp=True))  # one GPU: nothing to shard, still upcast
    assert (one.weights, one.optimizer) == (4e9, 8e9) and one.gathered == e.gathered
    with pytest.raises(ValueError, match="zero must be 0"):
        estimate(SHAPE, _setup(zero=3, fsdp=True))
    assert main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "8", "--fsdp2"]) == 0
    assert "FSDP2 (full shard)" in capsys.readouterr().out
    assert main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "8", "--fsdp2", "--json"]) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert (
        main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "8", "--fsdp2", "--no_bf16", "--json"])
        == 0
    )
    plain = json.loads(capsys.readouterr().out)
    assert mixed["optimizer"] == 2 * plain["optimizer"] and mixed["weights"] == 2 * plain["weights"]
    assert main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "8", "--fsdp2", "--offload"]) == 2
    assert "--fsdp2 --offload" in capsys.readouterr().err


def test_reference_model_for_beta_only_without_lora():
    assert estimate(SHAPE, _setup(zero=3, beta=0.04)).reference == 2e9 / 8
    assert estimate(SHAPE, _setup(zero=2, beta=0.04)).reference == 2e9
    assert estimate(SHAPE, _setup(zero=3, beta=0.04, lora_r=8)).reference == 0  # adapters off


def test_lora_and_frozen_vision_shrink_trainable_states():
    e = estimate(SHAPE, _setup(zero=3, lora_r=16))
    assert e.trainable_params == 16 * 1_000_000
    assert e.optimizer == 12 * 16_000_000 // 8 == 24_000_000
    assert e.weights == 2 * (1_000_000_000 + 16_000_000) // 8
    frozen = estimate(SHAPE, _setup(zero=3, freeze_vision=True))
    assert frozen.trainable_params == 900_000_000


def test_activations_logits_and_vllm_by_hand():
    s = _setup(zero=3, gradient_checkpointing=False)
    assert image_tokens(SHAPE, s.max_pixels) == 100  # 28*28*100 pixels, one token per 28x28
    seq = 100 + 100 + 100
    per_token_layer = 2 * (7 * 1000 + 2 * 200 + 4 * 3000)  # 38 800 bytes
    patches = 28 * 28 * 100 // 14**2  # 400
    per_patch_layer = 2 * (9 * 100 + 4 * 400)  # 5 000 bytes
    e = estimate(SHAPE, s)
    assert e.activations == per_token_layer * seq * 10 + per_patch_layer * patches * 2
    # TRL's fused LM head: two fp32 tiles (100 tokens x 10 000 vocab), the hidden gradient, the head's
    # fp32 weight gradient (tied: vocab x hidden)
    assert e.logits == 2 * 100 * 10_000 * 4 + 100 * 1000 * 4 + 4 * 10_000 * 1000
    assert estimate(SHAPE, _setup(zero=3, lora_r=8)).logits == 2 * 100 * 10_000 * 4 + 100 * 1000 * 4
    kv = 2 * 10 * 200 * 2 * seq
    assert e.vllm_min == 2e9 + kv
    ckpt = estimate(SHAPE, _setup(zero=3))
    assert ckpt.activations == (2 * 1000 * seq * 10 + per_token_layer * seq) + (
        2 * 100 * patches * 2 + per_patch_layer * patches
    )


def test_fit_verdicts():
    e = estimate(SHAPE, _setup(zero=3))
    assert e.fits_server(24) and e.fits_colocate(80, 0.3)
    huge = estimate(SHAPE, _setup(zero=2, gpus=1))  # 16 GB of states + overhead
    assert not huge.fits_colocate(24, 0.3) and huge.training > 16e9
    with pytest.raises(ValueError):
        estimate(SHAPE, _setup(zero=1))


def test_parameter_count_matches_the_real_tiny_model(tiny_model):
    import torch
    from transformers import AutoModelForImageTextToText

    path = tiny_model("qwen2_vl")
    shape = shape_of(load_model_config(path))
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    assert shape.total_params == sum(p.numel() for p in model.parameters())
    assert shape.vision_params == sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
    assert shape.hidden == 64 and shape.patch_size == 14
    # also from the config.json path itself
    assert shape_of(load_model_config(f"{path}/config.json")).total_params == shape.total_params


@pytest.mark.parametrize("lora_r", [0, 8])
def test_no_deepspeed_states_are_what_torch_adamw_allocates(tiny_model, lora_r):
    """``--zero 0``: weights, gradients and AdamW moments equal the bytes of the tensors a real bf16 model
    (peft adapters in fp32) and ``torch.optim.AdamW`` hold after a step (the GPU check measured 16.7 GiB
    where the ZeRO-2 accounting said 46)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from r1vision.trainer.setup import lora_config

    path = tiny_model("qwen2_vl")
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.bfloat16)
    if lora_r:
        model = get_peft_model(model, lora_config(lora_r, 2 * lora_r, 0.0, "all-linear-lm"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.grad = torch.ones_like(p)
    opt = torch.optim.AdamW(trainable, lr=1e-3)
    opt.step()

    def nbytes(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    moments = [v for st in opt.state.values() for k, v in st.items() if k in ("exp_avg", "exp_avg_sq")]
    e = estimate(shape_of(load_model_config(path)), _setup(gpus=1, zero=0, lora_r=lora_r))
    assert e.trainable_params == sum(p.numel() for p in trainable)
    assert e.weights == nbytes(model.parameters())
    assert e.gradients == nbytes(p.grad for p in trainable)
    assert e.optimizer == nbytes(moments)
    # DDP over 2 GPUs: the same states plus the reducer's gradient buckets, nothing sharded
    ddp = estimate(shape_of(load_model_config(path)), _setup(gpus=2, zero=0, lora_r=lora_r))
    assert (ddp.weights, ddp.optimizer, ddp.gradients) == (e.weights, e.optimizer, 2 * e.gradients)


def test_no_deepspeed_refuses_offload_in_one_line(capsys):
    with pytest.raises(ValueError, match="offload needs DeepSpeed"):
        estimate(SHAPE, _setup(zero=0, offload=True))
    assert (
        main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "1", "--zero", "0", "--offload"]) == 2
    )
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--offload needs DeepSpeed: --zero 2 or 3 (--zero 0 is plain DDP)")
    )


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("qwen2-vl-2b", 2.21),
        ("qwen2-vl-7b", 8.29),
        ("Qwen/Qwen2.5-VL-3B-Instruct", 3.75),
        ("qwen2.5-vl-7b", 8.29),
        ("qwen3-vl-4b", 4.44),
        ("qwen3-vl-8b", 8.77),
        ("Qwen/Qwen3-VL-30B-A3B-Instruct", 31.07),
        ("qwen3.5-0.8b", 0.85),
        ("qwen3.6-35b-a3b", 35.11),
    ],
)
def test_builtin_shapes_match_published_sizes(name, billions):
    shape = shape_of(load_model_config(name))
    assert abs(shape.total_params / 1e9 - billions) < 0.01


def test_builtin_list_and_cli(capsys):
    assert len(builtin_shapes()) == 9
    assert main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "8", "--zero", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["training"] == sum(
        out[k]
        for k in (
            "weights",
            "gradients",
            "optimizer",
            "gathered",
            "reference",
            "activations",
            "logits",
            "overhead",
        )
    )
    assert out["fits_80gb_colocate"] is True
    assert main(["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "8", "--zero", "2"]) == 0
    text = capsys.readouterr().out
    assert "24 GB card" in text and "80 GB card" in text and f"{GIB}" not in text


# (model, GPUs): three sizes, DeepSpeed's estimator run on the same model built on the meta device
DS_CASES = [("qwen2-vl-2b", 8), ("qwen2.5-vl-3b", 4), ("qwen2.5-vl-7b", 7), ("qwen3-vl-30b-a3b", 8)]


def _deepspeed_counts(name: str) -> tuple[int, int]:
    """total and largest-layer params the way DeepSpeed's ``model_to_params`` counts them (its own code
    dedupes by data_ptr, which the meta device does not have: dedupe by identity instead)."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(load_model_config(name))
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


@pytest.mark.parametrize(("name", "gpus"), DS_CASES)
@pytest.mark.parametrize(("zero", "offload"), [(2, False), (2, True), (3, False), (3, True)])
def test_model_states_agree_with_deepspeeds_estimator(name, gpus, zero, offload):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total, largest = _deepspeed_counts(name)
    if zero == 3:
        _, ds_gpu, _ = estimate_zero3_model_states_mem_needs(
            total, largest, gpus, 1, cpu_offload=offload, cpu_offload_params=offload, zero_init=True
        )
    else:
        _, ds_gpu = estimate_zero2_model_states_mem_needs(total, gpus, 1, cpu_offload=offload)
    ours = estimate(shape_of(load_model_config(name)), _setup(gpus=gpus, zero=zero, offload=offload))
    assert abs(ours.model_states - ds_gpu) <= 0.05 * ds_gpu, (ours.model_states / GIB, ds_gpu / GIB)


def test_load_dtype_sync_and_generation_peaks_by_hand():
    """fp32 loading doubles DDP weights; a vLLM sync adds one layer and its copy; HF generation under
    ZeRO-3 adds the gathered rest of the model and the KV cache; fits are judged on the peak."""
    base = dict(gpus=8, zero=2, batch=2, prompt_tokens=100, completion_tokens=100, max_pixels=28 * 28 * 4)
    bf16 = estimate(SHAPE, TrainSetup(**base, generation="vllm_colocate"))
    fp32 = estimate(SHAPE, TrainSetup(**base, generation="vllm_colocate", weight_bytes=4))
    assert bf16.weights == 2 * SHAPE.total_params and fp32.weights == 4 * SHAPE.total_params
    layer = SHAPE.largest_layer_params or SHAPE.largest_block_params
    assert bf16.sync_peak == 2 * 2 * layer and fp32.sync_peak == 2 * 4 * layer and bf16.generation_peak == 0
    z3 = estimate(SHAPE, TrainSetup(**{**base, "zero": 3}, generation="hf"))
    seq = 100 + image_tokens(SHAPE, 28 * 28 * 4) + 100
    kv = 2 * SHAPE.layers * SHAPE.kv_dim * 2 * 2 * seq
    assert z3.generation_peak == kv + 2 * SHAPE.total_params - 2 * SHAPE.total_params // 8
    assert z3.peak == max(z3.training, z3.model_states + z3.reference + z3.overhead + z3.generation_peak)
    assert z3.peak > z3.training  # the gathered model outweighs the step's activations here
    assert not z3.fits_server(z3.training / GIB + 0.01)  # a card that holds the step but not the peak


def test_fsdp2_sync_gathers_the_fp32_master_of_a_trainable_layer():
    """Under FSDP2 with bf16 mixed precision a trainable parameter is held as an fp32 master (see
    test_fsdp2_under_bf16_holds_fp32_masters_as_the_estimate_counts), and TRL's FSDP2 walk gathers it as held:
    the sync peak is an fp32 layer and its bf16 copy; without mixed precision, or for a LoRA base (frozen,
    in the load dtype), two bf16 layers."""
    base = dict(gpus=2, zero=0, fsdp=True, batch=2, prompt_tokens=100, completion_tokens=100,
                max_pixels=28 * 28 * 4, generation="vllm_colocate")  # fmt: skip
    layer = SHAPE.largest_layer_params or SHAPE.largest_block_params
    assert estimate(SHAPE, TrainSetup(**base)).sync_peak == (4 + 2) * layer
    assert estimate(SHAPE, TrainSetup(**base, bf16_autocast=False)).sync_peak == (2 + 2) * layer
    assert estimate(SHAPE, TrainSetup(**base, lora_r=16)).sync_peak == (2 + 2) * layer
    ddp = estimate(SHAPE, TrainSetup(**{**base, "fsdp": False})).sync_peak
    assert ddp == (2 + 2) * layer  # DDP and ZeRO keep the load dtype


def test_adapter_sync_peak_is_the_adapter_not_a_merged_layer():
    """vllm_lora_adapters: the sync gathers the fp32 adapter (not a layer and its merged copy) and the
    engine holds a bf16 slot of it."""
    base = dict(gpus=1, zero=3, lora_r=16, batch=2, prompt_tokens=100, completion_tokens=100,
                max_pixels=28 * 28 * 4, generation="vllm_colocate")  # fmt: skip
    merged = estimate(SHAPE, TrainSetup(**base))
    adapter = estimate(SHAPE, TrainSetup(**base, lora_adapters=True))
    trainable = 16 * SHAPE.lora_in_out
    assert adapter.sync_peak == 4 * trainable and adapter.vllm_min == merged.vllm_min + 2 * trainable
    assert (
        estimate(SHAPE, TrainSetup(**{**base, "lora_r": 0}, lora_adapters=True)).sync_peak == merged.sync_peak
    )
    seven_b = shape_of(load_model_config("Qwen/Qwen2.5-VL-7B-Instruct"))  # r 16: 154 MiB vs a merged layer
    assert (
        estimate(seven_b, TrainSetup(**base, lora_adapters=True)).sync_peak
        < estimate(seven_b, TrainSetup(**base)).sync_peak
    )


@pytest.mark.parametrize(
    ("name", "experts", "top_k"), [("qwen3-vl-30b-a3b", 128, 8), ("qwen3.6-35b-a3b", 256, 8)]
)
def test_moe_total_and_active_counts_and_the_gathered_experts(name, experts, top_k, capsys):
    """'30B-A3B' / '35B-A3B': about 3 B of the language model's parameters are active per token, while every
    expert is stored and trained (states follow the total) and ZeRO-3 gathers a layer's fused experts whole."""
    config = load_model_config(name)
    text = config.get_text_config()
    shape = shape_of(config)
    assert (shape.experts, shape.experts_per_token) == (experts, top_k)
    assert 3.0e9 < shape.active_params - shape.vision_params < 3.6e9
    one_layer_experts = experts * 3 * text.hidden_size * text.moe_intermediate_size  # gate, up, down
    assert shape.largest_layer_params == one_layer_experts
    est = estimate(shape, _setup(gpus=8, zero=3))
    assert est.gathered == 4 * one_layer_experts
    assert est.optimizer == 12 * shape.total_params // 8
    assert main(["estimate-memory", "--model", name, "--gpus", "8"]) == 0
    assert f"of {experts} experts" in capsys.readouterr().out


def test_qwen3_5_cache_is_what_transformers_allocates(tiny_model):
    """Qwen3.5 caches K and V in its full-attention layers only; its gated-delta-net layers hold a fixed
    state per sequence. The estimate's cache equals the bytes of the cache the real model builds."""
    import torch
    from transformers import AutoModelForImageTextToText

    path = tiny_model("qwen3_5")
    shape = shape_of(load_model_config(path))
    assert shape.kv_layers == shape.layers // 2 and shape.state_bytes_per_seq > 0  # tiny: 1 linear, 1 full
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.bfloat16)
    batch, length = 3, 17
    cache = model(input_ids=torch.randint(0, 500, (batch, length)), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for value in vars(layer).values():
            for t in value.values() if isinstance(value, dict) else [value]:
                held += t.numel() * t.element_size() if torch.is_tensor(t) else 0
    assert shape.kv_bytes(batch * length, batch) == held
    published = shape_of(load_model_config("qwen3.5-0.8b"))
    assert (published.kv_layers, published.layers) == (6, 24)
