"""Per-GPU memory of a training layout: weights, gradients, optimizer, activations, vLLM. A diffusers
pipeline (``--model sd3.5-medium`` or a folder with ``model_index.json``) gets the text-to-image GRPO
estimate instead (its own flags: ``r1vision estimate-memory --model sd3.5-medium --help``)."""

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
    add(p, "--gpus", minimum=1, type=int, required=True, help="training GPUs in total (all nodes)")
    add(
        p,
        "--zero",
        type=int,
        choices=(0, 2, 3),
        default=3,
        help="DeepSpeed ZeRO stage; 0: no DeepSpeed (one GPU or DDP, AdamW states in the load dtype)",
    )
    add(p, "--offload", action="store_true", help="offload optimizer (ZeRO-2) or it and weights (3)")
    add(
        p,
        "--fsdp2",
        action="store_true",
        help="FSDP2 full shard instead of DeepSpeed (--accelerate_config fsdp2)",
    )
    add(p, "--lora", minimum=0, type=int, default=0, metavar="R", help="LoRA rank (0: full fine-tuning)")
    add(p, "--freeze_vision", action="store_true")
    add(p, "--batch", minimum=1, type=int, default=4, help="per-device batch, in sequences")
    add(p, "--prompt_tokens", type=int, default=256, help="text tokens of a prompt")
    add(p, "--completion_tokens", type=int, default=1024, help="max_completion_length")
    add(p, "--max_pixels", type=int, default=602112)
    add(p, "--images", minimum=1, type=int, default=1, help="images per prompt")
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
        "--no_bf16",
        action="store_true",
        help="training without bf16 mixed precision (--bf16 false); under --fsdp2 the states then stay in the "
        "load dtype instead of fp32 masters",
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


def build_t2i_parser() -> argparse.ArgumentParser:
    p = parser("estimate-memory", "Per-GPU memory of text-to-image GRPO on an SD3/SD3.5 pipeline.")
    add(p, "--model", required=True, help="sd3.5-medium or a local diffusers SD3 folder")
    add(p, "--resolution", minimum=16, type=int, default=512)
    add(
        p,
        "--batch",
        minimum=1,
        type=int,
        default=32,
        help="images in one training forward (prompts per step x group)",
    )
    add(p, "--rollout_images", type=int, default=None, help="images sampled per step (default: --batch)")
    add(p, "--steps", minimum=1, type=int, default=10, help="sampling steps of a rollout")
    add(p, "--lora", minimum=0, type=int, default=32, metavar="R", help="LoRA rank (0: full fine-tuning)")
    add(p, "--denoiser_dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    add(p, "--no_bf16", action="store_true", help="text encoders in the denoiser's dtype, not bf16")
    add(p, "--no_guidance", action="store_true", help="no classifier-free guidance (1 row per image)")
    add(p, "--no_gradient_checkpointing", action="store_true")
    add(p, "--json", action="store_true", help="print the numbers as JSON")
    return p


def _is_pipeline(model: str) -> bool:
    from pathlib import Path

    from r1vision.diffusion.estimate import BUILTIN

    return model.lower() in BUILTIN or (Path(model) / "model_index.json").is_file()


def run_t2i(argv: Sequence[str]) -> int:
    """The text-to-image estimate (``r1vision.diffusion.estimate``)."""
    import json

    a = build_t2i_parser().parse_args(list(argv))
    from r1vision.diffusion.estimate import T2ISetup, format_report, t2i_memory_report

    setup = T2ISetup(
        resolution=a.resolution,
        batch=a.batch,
        rollout_images=a.rollout_images or a.batch,
        steps=a.steps,
        guidance=not a.no_guidance,
        lora_r=a.lora,
        denoiser_dtype=a.denoiser_dtype,
        bf16=not a.no_bf16,
        gradient_checkpointing=not a.no_gradient_checkpointing,
    )
    report = t2i_memory_report(a.model, setup)
    print(json.dumps(report, indent=2) if a.json else format_report(report))
    return 0


def run(argv: Sequence[str]) -> int:
    argv = list(argv)
    model = next((argv[i + 1] for i, x in enumerate(argv[:-1]) if x == "--model"), None)
    if model is None:
        model = next((x.split("=", 1)[1] for x in argv if x.startswith("--model=")), None)
    if model and _is_pipeline(model):
        return run_t2i(argv)
    a = build_parser().parse_args(argv)
    from r1vision.commands._args import UsageError

    if a.fsdp2 and a.offload:
        raise UsageError(
            "--fsdp2 --offload: the shipped fsdp2 layout does not offload; use --zero 3 --offload"
        )
    zero = 0 if a.fsdp2 else a.zero  # FSDP2 replaces DeepSpeed (its states are --zero 0's, sharded)
    if a.offload and zero == 0:
        raise UsageError("--offload needs DeepSpeed: --zero 2 or 3 (--zero 0 is plain DDP)")
    from r1vision.estimate import TrainSetup, memory_report

    setup = TrainSetup(
        gpus=a.gpus,
        zero=zero,
        fsdp=a.fsdp2,
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
        bf16_autocast=not a.no_bf16,
        generation=a.generation,
    )
    try:
        print(memory_report(a.model, setup, as_json=a.json))
    except OSError as exc:  # neither a built-in shape nor a folder, and the Hub cannot be asked
        from r1vision.estimate import builtin_shapes

        raise UsageError(
            f"--model {a.model}: not a built-in shape ({', '.join(builtin_shapes())}), a local folder or "
            f"config.json, nor a Hub id that can be read here ({str(exc).splitlines()[0][:120]})"
        ) from None
    return 0
