"""``r1vision estimate-memory``'s model-state figures against DeepSpeed's own estimator, same run.

For each model shape (built on the meta device from its config, no weights) and each ZeRO layout, prints
r1vision's per-GPU model states (weights, gradients, optimizer, ZeRO-3 working set) next to DeepSpeed's
``estimate_zero{2,3}_model_states_mem_needs`` for full fine-tuning, and the ratio. Then the whole
per-GPU estimate of the 24 GB recipe and of the layouts it was chosen over.

    .venv/bin/python benchmarks/bench_estimate.py
"""

from __future__ import annotations

import argparse

import torch

GIB = 1024**3
SHAPES = [("qwen2-vl-2b", 8), ("qwen2.5-vl-3b", 4), ("qwen2.5-vl-7b", 7), ("qwen3-vl-8b", 8)]
LAYOUTS = [(2, False), (2, True), (3, False), (3, True)]


def _deepspeed(total: int, largest: int, gpus: int, zero: int, offload: bool) -> int:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    if zero == 3:
        return estimate_zero3_model_states_mem_needs(
            total, largest, gpus, 1, cpu_offload=offload, cpu_offload_params=offload, zero_init=True
        )[1]
    return estimate_zero2_model_states_mem_needs(total, gpus, 1, cpu_offload=offload)[1]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    from transformers import AutoModelForImageTextToText

    from r1vision.estimate import TrainSetup, estimate, load_model_config, shape_of

    print("| model | GPUs | layout | r1vision GiB | DeepSpeed GiB | ratio |")
    print("|---|---|---|---|---|---|")
    for name, gpus in SHAPES:
        config = load_model_config(name)
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config)
        # DeepSpeed's model_to_params, deduplicating by identity (meta tensors have no data_ptr)
        total = sum({id(p): p.numel() for p in model.parameters()}.values())
        largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
        shape = shape_of(config)
        for zero, offload in LAYOUTS:
            ours = estimate(shape, TrainSetup(gpus=gpus, zero=zero, offload=offload)).model_states
            theirs = _deepspeed(total, largest, gpus, zero, offload)
            layout = f"ZeRO-{zero}{' + offload' if offload else ''}"
            print(
                f"| {name} | {gpus} | {layout} | {ours / GIB:.2f} | {theirs / GIB:.2f} | {ours / theirs:.3f} |"
            )
    print()
    print(
        "24 GB cards, ZeRO-3 on 4 training GPUs, batch 2 x (1024 text + 512 image + 1024 completion) tokens:"
    )
    print("| model | training | per-GPU total GiB | fits 24 GiB |")
    print("|---|---|---|---|")
    for name, lora, offload in [
        ("qwen2-vl-2b", 0, False),
        ("qwen2.5-vl-3b", 0, False),
        ("qwen2.5-vl-7b", 0, False),
        ("qwen2.5-vl-7b", 0, True),
        ("qwen2.5-vl-7b", 64, False),
    ]:
        setup = TrainSetup(gpus=4, zero=3, offload=offload, lora_r=lora, freeze_vision=lora > 0, batch=2,
                           prompt_tokens=1024, completion_tokens=1024, max_pixels=401408)  # fmt: skip
        est = estimate(shape_of(load_model_config(name)), setup)
        kind = f"LoRA r={lora}" if lora else "full" + (" + offload" if offload else "")
        share = est.training / (24 * GIB)  # a "24 GB" card holds 24 GiB; activations are +-20 %
        fits = "no" if share > 1 else ("tight (> 85 %)" if share > 0.85 else "yes")
        print(f"| {name} | {kind} | {est.training / GIB:.1f} | {fits} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
