"""The ``r1vision`` command line: dispatch to one module per command (:mod:`r1vision.commands`).

The top-level help is generated from the command modules (their docstrings and groups); bad input a
command refuses is one line on stderr and exit code 2, without a traceback (``R1VISION_DEBUG=1`` shows it).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from r1vision.commands import COMMANDS, GROUPS
from r1vision.import_hooks import patch_on_import


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"r1vision.commands.{COMMANDS[name]}")


def usage() -> str:
    """``r1vision --help``: every command with its one-line help, by group."""
    by_group: dict[str, list[str]] = {g: [] for g in GROUPS}
    width = max(len(n) for n in COMMANDS)
    for name in COMMANDS:
        module = _module(name)
        summary = (module.__doc__ or "").strip().splitlines()[0]
        by_group[module.GROUP].append(f"  {name:<{width}}  {summary}")
    lines = ["usage: r1vision <command> [options]   (r1vision <command> --help for its options)", ""]
    for group, rows in by_group.items():
        if rows:
            lines += [f"{group}:", *rows, ""]
    lines.append("Every command also takes --allow_external_paths: dataset rows may name files outside their")
    lines.append("dataset folder (refused otherwise, naming the row). r1vision --version prints the version.")
    return "\n".join(lines)


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input (a message for the user), not a bug."""
    from r1vision.checkpoints import DiskFullError
    from r1vision.commands._args import UsageError
    from r1vision.rewards import UnknownRewardError
    from r1vision.tasks.loading import DatasetLoadError, DatasetValidationError
    from r1vision.tasks.options import TaskOptionError
    from r1vision.tasks.registry import RewardWeightsError, UnknownNameError
    from r1vision.vision.images import ImageLoadError
    from r1vision.vision.records import PredictionFileError
    from r1vision.vision.video import MixedVisionInputError, VideoLoadError

    return (
        UsageError,
        TaskOptionError,
        DatasetLoadError,
        DatasetValidationError,
        ImageLoadError,
        VideoLoadError,
        MixedVisionInputError,
        UnknownNameError,
        UnknownRewardError,
        RewardWeightsError,
        DiskFullError,
        PredictionFileError,
    )


def _quiet_deepspeed_on_cpu() -> None:
    """On a machine without an NVIDIA driver, tell DeepSpeed it is on a CPU (DS_ACCELERATOR=cpu): otherwise
    every command that imports transformers prints its "Setting accelerator to CPU" warning. On its CPU
    accelerator, DeepSpeed's comm backend is kept from compiling its shared-memory all-reduce op
    (:func:`_without_shared_memory_all_reduce`)."""
    import shutil

    if "DS_ACCELERATOR" not in os.environ and not (
        shutil.which("nvidia-smi") or os.path.exists("/dev/nvidiactl")
    ):
        os.environ["DS_ACCELERATOR"] = "cpu"
    if os.environ.get("DS_ACCELERATOR") == "cpu":
        patch_on_import("deepspeed.ops", _without_shared_memory_all_reduce)


def _without_shared_memory_all_reduce(module: ModuleType) -> None:
    """DeepSpeed's CPU comm backend JIT-compiles ``deepspeed_shm_comm`` when it starts: ~40 s of C++ on 2
    cores before the first ZeRO step, again in every fresh environment (the build hashes its include
    paths). Only ``inference_all_reduce`` (DeepSpeed's tensor-parallel inference) uses the op; ZeRO's
    collectives go through the process group either way, and without the op that call falls back to the
    group's all_reduce, as where the op cannot build (r1vision.versions.PATCHES)."""
    module.__compatible_ops__["deepspeed_shm_comm"] = False


def _global_flags(argv: list[str]) -> list[str]:
    """Take the options every command accepts off ``argv``; they act through the environment, so the
    processes a command launches inherit them. ``--allow_external_paths [true|false]``: dataset rows may
    name files outside their dataset folder (see ``tasks.loading.dataset_path``)."""
    from r1vision.tasks.loading import EXTERNAL_PATHS_ENV

    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name != "--allow_external_paths":
            out.append(arg)
            i += 1
            continue
        if not eq and i + 1 < len(argv) and argv[i + 1].lower() in ("true", "false", "1", "0", "yes", "no"):
            value, i = argv[i + 1], i + 1
        os.environ[EXTERNAL_PATHS_ENV] = "0" if value.lower() in ("false", "0", "no") else "1"
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``r1vision`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from r1vision import __version__

        print(f"r1vision {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        from r1vision.suggest import closest

        close = closest(command, COMMANDS)
        hint = f"; did you mean {close!r}?" if close else ""
        print(f"r1vision: unknown command {command!r}{hint} (r1vision --help lists them)", file=sys.stderr)
        return 2
    rest = _global_flags(rest)
    errors = _bad_input_errors()
    _quiet_deepspeed_on_cpu()
    from r1vision.parent_watch import launched, watch_parent

    if launched():  # a torchrun/accelerate worker: end with the launcher, never live on as an orphan
        watch_parent()
    try:
        return _module(command).run(rest) or 0
    except errors as exc:  # bad input: the message says what, no traceback
        if os.environ.get("R1VISION_DEBUG"):
            raise
        print(f"r1vision {command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
