"""The one skeleton of the training commands, ``r1vision sft | grpo | t2i-grpo``, driven by :data:`KINDS`:
help, the pre-check (before any heavy import), the launch in N processes (``--num_processes`` /
``--accelerate_config``), ``--dry-run``, TRL's parser (a YAML ``--config`` gives defaults, flags override
it), the resume and used-output-folder rules, the run, and the end of a launched worker."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from r1vision.commands._args import UsageError

# The shipped accelerate layouts by name, as `trl --accelerate_config zero3` takes them.
_LAYOUT_NAMES = {"ddp": "ddp", "multi_gpu": "ddp", "zero2": "zero2", "zero3": "zero3", "fsdp2": "fsdp2"}


def _parse_vlm(kind: str) -> Callable[[Sequence[str]], tuple[Any, Any]]:
    def parse(argv: Sequence[str]) -> tuple[Any, Any]:
        from r1vision.runners.train import parse_train_argv

        return parse_train_argv(kind, argv)

    return parse


def _run_vlm(kind: str) -> Callable[[Any, Any], str]:
    def run(script: Any, config: Any) -> str:
        from r1vision.runners.train import run_grpo, run_sft

        return run_grpo(script, config) if kind == "grpo" else run_sft(script, config)

    return run


def _dry_vlm(kind: str) -> Callable[[Sequence[str]], int]:
    def dry(argv: Sequence[str]) -> int:
        from r1vision.dry_run import main as dry_run

        return dry_run(kind, argv)

    return dry


def _parse_t2i(argv: Sequence[str]) -> tuple[Any, Any]:
    from r1vision.runners.t2i import parse_t2i_argv

    script, config = parse_t2i_argv(list(argv))
    if "--dry-run" not in argv:  # a dry run judges the layout for the processes it plans (--gpus)
        config.check_generation_layout(config.world_size)
    return script, config


def _run_t2i(script: Any, config: Any) -> str:
    from r1vision.runners.t2i import run_t2i_grpo

    return run_t2i_grpo(script, config)


def _dry_t2i(argv: Sequence[str]) -> int:
    """Everything checked as training would, plus the memory estimate; no weights loaded. Exit 2 when a
    check refuses it or the plan fits no card (``--card_gb G``: that card)."""
    import torch

    from r1vision.dry_run import _pop_flag
    from r1vision.runners.t2i import dry_run
    from r1vision.tasks.loading import DatasetLoadError, DatasetValidationError
    from r1vision.trainer.checkpoint import OutputDirInUseError

    argv = [a for a in argv if a != "--dry-run"]
    card_gb = _pop_flag(argv, "--card_gb", float, None)
    processes = _pop_flag(argv, "--gpus", int, 1)
    _pop_flag(argv, "--zero", int, None)  # the layout changes no per-GPU number of this estimate
    if not torch.cuda.is_available():  # judged for the GPU the run targets: bf16 is refused on a CPU
        argv += ["--use_cpu", "true"]
    from r1vision.runners.t2i import parse_t2i_argv

    try:
        script, config = parse_t2i_argv(argv)
    except ValueError as exc:
        raise UsageError(str(exc).strip().splitlines()[0]) from None
    try:
        config.check_generation_layout(processes)
        report, problems = dry_run(script, config, card_gb, processes)
    except (
        OutputDirInUseError,
        DatasetLoadError,
        DatasetValidationError,
        ValueError,
        FileNotFoundError,
    ) as exc:
        print(f"r1vision t2i-grpo: error: {exc}", file=sys.stderr)
        return 2
    print(report)
    if problems:
        print("\nREFUSED: this run cannot work as configured:")
        print("\n".join(f"  - {p}" for p in problems))
        return 2
    print("\nOK: nothing refuses this run (no GPU was touched)")
    return 0


@dataclass(frozen=True)
class TrainKind:
    """One training command: its flag set (``train_flags.json``), parser, runner and dry run."""

    command: str
    flags: str
    parse: Callable[[Sequence[str]], tuple[Any, Any]]
    run: Callable[[Any, Any], str]
    dry_run: Callable[[Sequence[str]], int]
    saved: str  # printed after the run, with {out}
    refused_layouts: tuple[str, ...] = ()  # shipped --accelerate_config names this trainer cannot run


KINDS: dict[str, TrainKind] = {
    "sft": TrainKind("sft", "sft", _parse_vlm("sft"), _run_vlm("sft"), _dry_vlm("sft"), "saved to {out}"),
    "grpo": TrainKind("grpo", "grpo", _parse_vlm("grpo"), _run_vlm("grpo"), _dry_vlm("grpo"), "saved to {out}"),
    "t2i-grpo": TrainKind("t2i-grpo", "t2i", _parse_t2i, _run_t2i, _dry_t2i,
                          "saved to {out} (LoRA for diffusers: {out}/lora, EMA: {out}/lora_ema)", ("zero3", "fsdp2")),
}  # fmt: skip


def parse(command: str, argv: Sequence[str]) -> tuple[Any, Any]:
    """The kind's parse, a config's own refusal (TRL's or ours) as one line (exit 2)."""
    try:
        return KINDS[command].parse(argv)
    except ValueError as exc:
        raise UsageError(str(exc).strip().splitlines()[0]) from None


def without_launch_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` without the launcher's own flags (``--num_processes``, ``--accelerate_config``, any spelling)."""
    from r1vision.configs import CommandLine

    return CommandLine.of(argv).without("num_processes", "accelerate_config")


def launch_argv(kind: str, argv: Sequence[str]) -> list[str] | None:
    """With ``--num_processes N`` and/or ``--accelerate_config NAME|FILE`` (as ``trl grpo`` takes them), the
    ``accelerate launch`` command that runs this command line in N processes; ``None`` without them or
    inside a launched worker. Names: ``ddp``/``multi_gpu``, ``zero2``, ``zero3`` (the shipped DeepSpeed
    JSONs), ``fsdp2`` (GPUs only); anything else is an accelerate config file (a path or a name under ``configs/accelerate``)."""
    import os

    from r1vision.configs import flag_values

    values = flag_values(argv)
    if os.environ.get("LOCAL_RANK") or not ({"num_processes", "accelerate_config"} & values.keys()):
        return None
    if values.get("num_processes") == "1" and not values.get("accelerate_config"):
        return None  # one process: run here (accelerate refuses --multi_gpu with one)
    rest = without_launch_flags(argv)
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
        if layout == "fsdp2" and not torch.cuda.is_available():
            raise UsageError("--accelerate_config fsdp2: accelerate shards with FSDP on GPUs only (on CPU it "
                             "would run plain DDP); use ddp here")  # fmt: skip
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

    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(path),
        "--num_processes",
        str(nproc),
        "-m",
        "r1vision.cli",
        kind,
        *rest,
    ]


def planned_launch(argv: Sequence[str]) -> list[str]:
    """A dry run's command line: the launch flags become the plan it judges (``--num_processes N`` is
    ``--gpus N``, a shipped ``--accelerate_config`` layout is ``--zero 0|2|3`` or ``--fsdp2``) instead of starting processes."""
    from r1vision.configs import flag_values

    values = flag_values(argv)
    out = without_launch_flags(argv)
    if values.get("num_processes") and "gpus" not in values:
        out += ["--gpus", str(values["num_processes"])]
    layout = _LAYOUT_NAMES.get(str(values.get("accelerate_config")))
    if layout == "fsdp2":
        out += ["--fsdp2"]
    elif layout and "zero" not in values:
        out += ["--zero", {"ddp": "0", "zero2": "2", "zero3": "3"}[layout]]
    return out


def train(command: str, argv: Sequence[str]) -> int:
    """Parse, train, save; a refusal (an output folder that holds a run, no checkpoint to resume, bad data)
    is one line and exit code 2."""
    from r1vision.commands._precheck import check_required, check_train_argv, help_text

    kind = KINDS[command]
    if "-h" in argv or "--help" in argv:  # r1vision's options first, grouped; no TRL import
        from importlib import import_module

        module = import_module(f"r1vision.commands.{command.replace('-', '_')}")
        print(help_text(kind.flags, module.USAGE))
        return 0
    if "--help-all" in argv:  # TRL's parser: every field with its help
        parse(command, ["--help" if a == "--help-all" else a for a in argv])
        return 0
    check_train_argv(kind.flags, argv)  # flags, recipe, task, local paths, ranges: before TRL is imported
    from r1vision.configs import flag_values

    layout = flag_values(argv).get("accelerate_config")
    if layout in kind.refused_layouts:
        raise UsageError(f"--accelerate_config {layout}: not supported by {command} yet; use ddp or zero2")
    if "--dry-run" in argv:  # resolve and check everything, touch no GPU, launch nothing
        return kind.dry_run(planned_launch(argv))
    launched = launch_argv(command, argv)
    if launched is not None:
        import subprocess

        check_required(kind.flags, argv)

        print(f"r1vision {command}: launching {' '.join(launched)}", file=sys.stderr)
        return subprocess.call(launched)
    script, config = parse(command, without_launch_flags(argv))  # --num_processes 1 runs here
    from r1vision.checkpoints import newest_complete_checkpoint
    from r1vision.trainer.checkpoint import (
        LayoutChangeError,
        NoCheckpointError,
        OutputDirInUseError,
        check_output_dir,
        resolve_last_checkpoint,
    )
    from r1vision.trainer.distributed import finish_process
    from r1vision.trainer.preemption import EXIT_PREEMPTED, Preempted, clear_marker

    try:
        if str(config.resume_from_checkpoint).lower() == "auto":  # a requeued job: resume if there is one
            config.resume_from_checkpoint = newest_complete_checkpoint(config.output_dir)[0]
        elif config.resume_from_checkpoint is True:  # "last": chosen now, before the model loads
            config.resume_from_checkpoint = resolve_last_checkpoint(config.output_dir)
        if config.resume_from_checkpoint and config.process_index == 0:
            print(f"r1vision {command}: resuming from {config.resume_from_checkpoint}", file=sys.stderr)
            clear_marker(config.output_dir)
        check_output_dir(config)  # before the model loads (train() checks again, for the Python API)
        out = kind.run(script, config)
    except (
        OutputDirInUseError,
        NoCheckpointError,
        LayoutChangeError,
    ) as exc:  # a refusal: it says what to pass
        if config.process_index == 0:
            print(f"r1vision {command}: error: {exc}", file=sys.stderr)
        return finish_process(2)
    except Preempted as exc:  # a signal: the checkpoint is saved, the job may be requeued
        if config.process_index == 0:
            print(f"r1vision {command}: preempted: {exc}", file=sys.stderr)
        return finish_process(EXIT_PREEMPTED)
    if config.process_index == 0:
        print(kind.saved.format(out=out))
    return finish_process(0)  # a launched worker exits here (no abort)
