"""Text-to-image GRPO (Flow-GRPO) on a diffusers SD3/SD3.5 pipeline with image rewards (OCR, ...)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

GROUP = "training"
USAGE = (
    "r1vision t2i-grpo --config RECIPE --model PIPELINE --dataset PROMPTS --output_dir O "
    "[--reward_funcs ocr ...] [--any_DiffusionGRPOConfig_field V] [--dry-run]"
)


def run(argv: Sequence[str]) -> int:
    from r1vision.commands._args import UsageError
    from r1vision.commands._precheck import check_train_argv, help_text

    argv = list(argv)
    if "-h" in argv or "--help" in argv:
        print(help_text("t2i", USAGE))
        return 0
    dry = "--dry-run" in argv
    argv = [x for x in argv if x != "--dry-run"]
    check_train_argv("t2i", argv)
    from trl import TrlParser

    from r1vision.configs import resolve_config_argv
    from r1vision.diffusion.config import DiffusionGRPOConfig
    from r1vision.runners.t2i import T2IScriptArguments, dry_run, run_t2i_grpo
    from r1vision.trainer.checkpoint import NoCheckpointError, OutputDirInUseError, resolve_last_checkpoint

    parser = TrlParser((T2IScriptArguments, DiffusionGRPOConfig), prog="r1vision t2i-grpo")
    resolved = resolve_config_argv(argv)
    if dry:  # judged for the GPU the run targets: TrainingArguments refuses bf16 on a CPU-only machine
        import torch

        if not torch.cuda.is_available():
            resolved += ["--use_cpu", "true"]
    try:
        script, config = parser.parse_args_and_config(resolved)
    except ValueError as exc:
        raise UsageError(str(exc).strip().splitlines()[0]) from None
    if dry:  # everything checked as training would, plus the memory estimate; no weights loaded
        try:
            print(dry_run(script, config))
        except (OutputDirInUseError, ValueError, FileNotFoundError) as exc:
            print(f"r1vision t2i-grpo: error: {exc}", file=sys.stderr)
            return 2
        print("dry run: OK (nothing trained)")
        return 0
    if str(config.resume_from_checkpoint).lower() in ("last", "true"):
        config.resume_from_checkpoint = resolve_last_checkpoint(config.output_dir)
        print(f"r1vision t2i-grpo: resuming from {config.resume_from_checkpoint}", file=sys.stderr)
    try:
        out = run_t2i_grpo(script, config)
    except (OutputDirInUseError, NoCheckpointError) as exc:
        print(f"r1vision t2i-grpo: error: {exc}", file=sys.stderr)
        return 2
    print(f"saved to {out} (LoRA for diffusers: {out}/lora, EMA: {out}/lora_ema)")
    return 0
