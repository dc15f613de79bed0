"""What ``r1vision sft`` and ``r1vision grpo`` share: TRL's parser (a YAML ``--config`` gives defaults,
flags override it), task options merged from the recipe and the command line, and ``--dry-run``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from r1vision.commands._args import UsageError

# The shipped accelerate layouts by name, as `trl --accelerate_config zero3` takes them.
_LAYOUT_NAMES = {"ddp": "ddp", "multi_gpu": "ddp", "zero2": "zero2", "zero3": "zero3"}


def parse(kind: str, argv: Sequence[str]) -> tuple[Any, Any]:
    """:func:`r1vision.runners.train.parse_train_argv`, a config's own refusal as one line (exit 2)."""
    from r1vision.runners.train import parse_train_argv

    try:
        return parse_train_argv(kind, argv)
    except ValueError as exc:  # a config's own check (TRL's or ours)
        raise UsageError(str(exc).strip().splitlines()[0]) from None


def launch_argv(kind: str, argv: Sequence[str]) -> list[str] | None:
    """With ``--num_processes N`` and/or ``--accelerate_config NAME|FILE`` (as ``trl grpo`` takes them), the
    ``accelerate launch`` command that runs this command line in N processes; ``None`` without them or
    inside a launched worker. Names: ``ddp``/``multi_gpu``, ``zero2``, ``zero3`` (the shipped DeepSpeed
    JSONs); anything else is an accelerate config file (a path or a name under ``configs/accelerate``)."""
    import os

    from r1vision.configs import flag_values

    values = flag_values(argv)
    if os.environ.get("LOCAL_RANK") or not ({"num_processes", "accelerate_config"} & values.keys()):
        return None
    rest, skip = [], False
    for arg in argv:  # the launcher's own flags are not the training command's
        name = arg[2:].split("=", 1)[0].replace("-", "_") if arg.startswith("--") else ""
        if skip:
            skip = False
            continue
        if name in ("num_processes", "accelerate_config"):
            skip = "=" not in arg
            continue
        rest.append(arg)
    try:
        nproc = int(values.get("num_processes") or 0)
    except ValueError:
        raise UsageError(f"--num_processes {values['num_processes']}: expected an integer") from None
    import torch

    if not torch.cuda.is_available() and "use_cpu" not in values:
        rest += ["--use_cpu", "true"]  # CPU processes talk over gloo
    nproc = nproc or max(torch.cuda.device_count(), 1)
    name = str(values.get("accelerate_config") or "ddp")
    from r1vision.configs import resolve_config
    from r1vision.trainer.distributed import launch_command

    if name in _LAYOUT_NAMES:
        layout = _LAYOUT_NAMES[name]
        ds = resolve_config(f"deepspeed/{layout}.json") if layout.startswith("zero") else None
        return launch_command(layout, nproc, [kind, *rest], deepspeed_config=ds)
    try:
        path = resolve_config(name if name.endswith(".yaml") else f"accelerate/{name}.yaml")
    except FileNotFoundError:
        try:
            path = resolve_config(name)
        except FileNotFoundError as exc:
            raise UsageError(f"--accelerate_config {name}: {exc}") from None
    import sys

    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(path),
            "--num_processes", str(nproc), "-m", "r1vision.cli", kind, *rest]  # fmt: skip


def train(kind: str, argv: Sequence[str]) -> int:
    """Parse, train, save; a refusal (an output folder that holds a run) is one line and exit code 2."""
    from r1vision.commands._precheck import check_train_argv, help_text

    if "-h" in argv or "--help" in argv:  # r1vision's options first, grouped; no TRL import
        from importlib import import_module

        print(help_text(kind, import_module(f"r1vision.commands.{kind}").USAGE))
        return 0
    if "--help-all" in argv:  # TRL's parser: every field with its help
        argv = ["--help" if a == "--help-all" else a for a in argv]
        parse(kind, argv)
        return 0
    check_train_argv(kind, argv)  # flags, recipe, task, local paths, ranges: before TRL is imported
    launched = launch_argv(kind, argv)
    if launched is not None:
        import subprocess

        print(f"r1vision {kind}: launching {' '.join(launched)}", file=sys.stderr)
        return subprocess.call(launched)
    if "--dry-run" in argv:  # resolve and check everything, touch no GPU (r1vision.dry_run)
        from r1vision.dry_run import main as dry_run

        return dry_run(kind, argv)
    script, config = parse(kind, argv)
    from r1vision.trainer.checkpoint import (
        NoCheckpointError,
        OutputDirInUseError,
        check_output_dir,
        resolve_last_checkpoint,
    )

    try:
        if config.resume_from_checkpoint is True:  # "last": chosen now, before the model loads
            config.resume_from_checkpoint = resolve_last_checkpoint(config.output_dir)
            if config.process_index == 0:
                print(f"r1vision {kind}: resuming from {config.resume_from_checkpoint}", file=sys.stderr)
        check_output_dir(config)  # before the model loads (train() checks again, for the Python API)
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
