"""What ``r1vision sft`` and ``r1vision grpo`` share: TRL's parser (a YAML ``--config`` gives defaults,
flags override it), task options merged from the recipe and the command line, and ``--dry-run``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


def recipe_path(argv: Sequence[str]) -> str | None:
    """The value of ``--config`` (or ``--config=X``), if any."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def parse(kind: str, argv: Sequence[str]) -> tuple[Any, Any]:
    """``(ScriptArguments, VisionSFTConfig | VisionGRPOConfig)`` from ``argv`` as TRL's scripts parse it.

    ``--task_options`` on the command line is merged into the recipe's ``task_options`` option by option
    (TrlParser alone would replace the whole mapping: the ``r1sgg`` preset's weights would be lost).
    """
    from trl import TrlParser

    from r1vision.configs import resolve_config_argv
    from r1vision.runners.train import ScriptArguments
    from r1vision.tasks.options import merge_options
    from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

    argv = resolve_config_argv(list(argv))
    config_cls = VisionGRPOConfig if kind == "grpo" else VisionSFTConfig
    parser = TrlParser((ScriptArguments, config_cls), prog=f"r1vision {kind}")
    script, config = parser.parse_args_and_config(argv)
    recipe = recipe_path(argv)
    if recipe and any(a == "--task_options" or a.startswith("--task_options=") for a in argv):
        import yaml

        with open(recipe) as f:
            recipe_options = (yaml.safe_load(f) or {}).get("task_options")
        script.task_options = merge_options(recipe_options, script.task_options)
    return script, config


def train(kind: str, argv: Sequence[str]) -> int:
    """Parse, train, save; a refusal (an output folder that holds a run) is one line and exit code 2."""
    if "--dry-run" in argv:  # resolve and check everything, touch no GPU (r1vision.dry_run)
        from r1vision.dry_run import main as dry_run

        return dry_run(kind, argv)
    script, config = parse(kind, argv)
    from r1vision.trainer.checkpoint import NoCheckpointError, OutputDirInUseError, resolve_last_checkpoint

    try:
        if config.resume_from_checkpoint is True:  # "last": chosen now, before the model loads
            config.resume_from_checkpoint = resolve_last_checkpoint(config.output_dir)
            if config.process_index == 0:
                print(f"r1vision {kind}: resuming from {config.resume_from_checkpoint}", file=sys.stderr)
        from r1vision.runners.train import run_grpo, run_sft

        out = run_grpo(script, config) if kind == "grpo" else run_sft(script, config)
    except (
        OutputDirInUseError,
        NoCheckpointError,
    ) as exc:  # a refusal, not a crash: the message says what to pass
        print(f"r1vision {kind}: error: {exc}", file=sys.stderr)
        return 2
    if config.process_index == 0:
        print(f"saved to {out}")
    from r1vision.trainer.distributed import finish_process  # a launched worker exits here (no abort)

    return finish_process(0)
