"""Per-GPU memory of a training layout: weights, gradients, optimizer, activations, vLLM."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "scale-out"


def build_parser() -> argparse.ArgumentParser:
    p = parser("estimate-memory", __doc__)
    add(
        p,
        "--model",
        required=True,
        help="folder, config.json, Hub id or a built-in shape (qwen2.5-vl-7b, ...)",
    )
    add(p, "--gpus", type=int, required=True, help="training GPUs in total (all nodes)")
    add(p, "--zero", type=int, choices=(2, 3), default=3)
    add(p, "--offload", action="store_true", help="offload optimizer (ZeRO-2) or it and weights (3)")
    add(p, "--lora", type=int, default=0, metavar="R", help="LoRA rank (0: full fine-tuning)")
    add(p, "--freeze_vision", action="store_true")
    add(p, "--batch", type=int, default=4, help="per-device batch, in sequences")
    add(p, "--prompt_tokens", type=int, default=256, help="text tokens of a prompt")
    add(p, "--completion_tokens", type=int, default=1024, help="max_completion_length")
    add(p, "--max_pixels", type=int, default=602112)
    add(p, "--images", type=int, default=1, help="images per prompt")
    add(p, "--no_gradient_checkpointing", action="store_true")
    add(p, "--vllm_gpu_memory_utilization", type=float, default=0.3)
    add(p, "--beta", type=float, default=0.0, help="GRPO's KL coefficient (> 0: reference model)")
    add(
        p,
        "--weights_dtype",
        choices=["bf16", "fp32"],
        default="bf16",
        help="dtype the weights load in (bf16: r1vision's GPU default; fp32: --dtype float32, TRL's default)",
    )
    add(
        p,
        "--generation",
        choices=["hf", "vllm_colocate", "vllm_server"],
        default="hf",
        help="generation backend: which transient (weight sync, HF generation) the peak includes",
    )
    add(p, "--json", action="store_true", help="print the numbers as JSON")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.estimate import TrainSetup, memory_report

    setup = TrainSetup(
        gpus=a.gpus,
        zero=a.zero,
        offload=a.offload,
        lora_r=a.lora,
        freeze_vision=a.freeze_vision,
        batch=a.batch,
        prompt_tokens=a.prompt_tokens,
        completion_tokens=a.completion_tokens,
        max_pixels=a.max_pixels,
        images=a.images,
        gradient_checkpointing=not a.no_gradient_checkpointing,
        vllm_gpu_memory_utilization=a.vllm_gpu_memory_utilization,
        beta=a.beta,
        weight_bytes=2 if a.weights_dtype == "bf16" else 4,
        generation=a.generation,
    )
    try:
        print(memory_report(a.model, setup, as_json=a.json))
    except OSError as exc:  # neither a built-in shape nor a folder, and the Hub cannot be asked
        from r1vision.commands._args import UsageError
        from r1vision.estimate import builtin_shapes

        raise UsageError(
            f"--model {a.model}: not a built-in shape ({', '.join(builtin_shapes())}), a local folder or "
            f"config.json, nor a Hub id that can be read here ({str(exc).splitlines()[0][:120]})"
        ) from None
    return 0
