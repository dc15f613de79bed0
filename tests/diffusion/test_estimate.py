"""``estimate-memory`` for text-to-image GRPO and ``t2i-grpo --dry-run``: exact parameter counts from configs,
activations measured on the meta device, and the loading/decoding choices the estimate assumes."""

from __future__ import annotations

import pytest
import torch

from r1vision.diffusion.estimate import (
    T2ISetup,
    activation_bytes,
    component_params,
    load_shape,
    t2i_memory_report,
)


def test_sd35_medium_counts_match_its_published_sizes():
    counts = component_params(load_shape("sd3.5-medium"))
    # 2.47 B with the 384x384 position table (a buffer of 226 M elements); 4.76 B T5-XXL encoder; CLIP-L/G
    assert counts["transformer"] == pytest.approx(2.47e9, rel=0.005)
    assert counts["text_encoder_3"] == pytest.approx(4.76e9, rel=0.005)
    assert counts["text_encoder"] == pytest.approx(123.6e6, rel=0.005)
    assert counts["text_encoder_2"] == pytest.approx(694.7e6, rel=0.005)
    assert counts["vae"] == pytest.approx(83.8e6, rel=0.005)


def test_counts_from_a_folder_equal_the_loaded_pipeline(tiny_sd3):
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3())
    counts = component_params(load_shape(tiny_sd3()))
    for part, value in counts.items():
        module = getattr(pipe, part)
        assert value == sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())


@pytest.mark.slow
def test_activations_scale_with_rows_and_checkpointing_keeps_less():
    tcfg = load_shape("sd3.5-medium")["transformer"]
    one = activation_bytes(tcfg, T2ISetup(gradient_checkpointing=False), rows=2)["activations"]
    two = activation_bytes(tcfg, T2ISetup(gradient_checkpointing=False), rows=4)["activations"]
    assert two == pytest.approx(2 * one, rel=0.02)
    ckpt = activation_bytes(tcfg, T2ISetup(gradient_checkpointing=True), rows=2)["activations"]
    assert ckpt < one / 4
    # attention counted as a flash kernel keeps it: 4x the pixels is ~4x the bytes, not the 16x of an s x s map
    big = activation_bytes(tcfg, T2ISetup(resolution=1024, gradient_checkpointing=False), rows=2)[
        "activations"
    ]
    assert 3.0 < big / one < 4.5


@pytest.mark.slow
def test_the_one_gpu_recipe_fits_an_80gb_card_and_full_precision_text_encoders_cost_more():
    base = T2ISetup(batch=32, rollout_images=32)
    report = t2i_memory_report("sd3.5-medium", base)
    assert report["fits"]["80 GB"] and not report["fits"]["24 GB"]
    fp32 = t2i_memory_report("sd3.5-medium", T2ISetup(batch=32, rollout_images=32, bf16=False))
    diff = fp32["lines"]["text encoders (frozen)"] - report["lines"]["text encoders (frozen)"]
    assert diff == pytest.approx(2 * (123.65e6 + 694.66e6 + 4762.3e6), rel=0.01)
    # rollout_batch_size 8: the no-grad forward holds 8 images' activations, the recorded latents all 32
    batched = t2i_memory_report("sd3.5-medium", T2ISetup(batch=32, rollout_images=32, rollout_batch=8))
    roll = "rollout forward (no grad)"
    assert batched["transients"][roll] * 4 == report["transients"][roll]
    assert batched["lines"]["recorded latents"] == report["lines"]["recorded latents"]


def test_decode_in_chunks_equals_one_decode(tiny_sd3):
    from r1vision.diffusion.families import DECODE_CHUNK, load_family

    family = load_family(tiny_sd3())
    latents = torch.randn(DECODE_CHUNK + 3, family.channels, 8, 8, generator=torch.Generator().manual_seed(0))
    chunked = family.decode(latents)
    whole = torch.cat([family.decode(latents[i : i + 1]) for i in range(len(latents))])
    assert chunked.shape[0] == DECODE_CHUNK + 3 and torch.allclose(chunked, whole, atol=1e-5)


def test_frozen_text_encoders_load_in_the_mixed_precision_dtype(tiny_sd3):
    from r1vision.diffusion.families import load_family

    family = load_family(tiny_sd3(), dtype=torch.float32, frozen_dtype=torch.bfloat16)
    pipe = family.pipe
    assert next(pipe.text_encoder_3.parameters()).dtype == torch.bfloat16
    assert next(pipe.text_encoder.parameters()).dtype == torch.bfloat16
    assert next(pipe.transformer.parameters()).dtype == torch.float32
    assert next(pipe.vae.parameters()).dtype == torch.float32
    cond = family.encode(['a sign that says "OPEN"'], guidance=True)
    v = family.velocity(family.transformer, torch.randn(1, family.channels, 8, 8), 0.5, cond, 4.5)
    assert v.dtype == torch.float32 and torch.isfinite(v).all()


@pytest.mark.slow
def test_cli_estimate_and_dry_run(tmp_path, capsys):
    from r1vision.cli import main

    assert main(["estimate-memory", "--model", "sd3.5-medium", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "peak (static + largest transient)" in out and "transformer 2,470 M" in out
    prompts = tmp_path / "p"
    prompts.mkdir()
    (prompts / "train.txt").write_text('a sign that says "OPEN"\n' * 8)  # one generation: 8 prompts
    argv = ["t2i-grpo", "--config", "t2i_ocr_sd35m_1gpu", "--model", "sd3.5-medium", "--dataset", str(prompts),
            "--output_dir", str(tmp_path / "run"), "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "8 images per micro-step, 64 sampled per generation" in out and "fits:" in out
    assert "OK: nothing refuses this run" in out
    assert not (tmp_path / "run").exists()  # nothing written
    # a plan that does not fit the card named (or any card listed) is refused, exit 2
    assert main([*argv, "--card_gb", "24"]) == 2
    out = capsys.readouterr().out
    assert "REFUSED" in out and "does not fit a 24 GB card" in out
    (prompts / "train.txt").write_text('a sign that says "OPEN"\na plain red square\n')
    assert main(argv) == 2
    assert "train.txt:2: prompt 'a plain red square'" in capsys.readouterr().err
