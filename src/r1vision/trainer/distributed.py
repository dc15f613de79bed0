"""Every distributed workaround in one place: CPU DeepSpeed, clean teardown, a record of the layout.

- :func:`prepare_distributed` runs inside the training config's ``__post_init__``. On machines without
  CUDA, accelerate leaves the DeepSpeed backend unset and then mis-counts the world size
  (``train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size``). Initialising
  ``PartialState(backend="gloo")`` *before* the config resolves its devices, and telling the Trainer to use
  that state (``accelerator_config={"use_configured_state": True}``), makes ZeRO-2/3 run on gloo.
- :func:`teardown` destroys the process group before exit (without it ~1 in 6 gloo runs aborts at exit),
  and :func:`finish_process` ends a launched worker without the interpreter's C++ finalisation: even
  after the group is destroyed, ~1 run in 7 still aborted there (``terminate called without an active
  exception``: a joinable ``std::thread`` of gloo / the c10d store destroyed at exit), turning a finished
  run into SIGABRT and a failed Slurm job.
- :func:`record_layout` writes ``distributed.json``: world size, backend and, under ZeRO-3, how many
  parameter elements each rank really holds — the proof that a run was distributed as asked.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

LAYOUT_FILE = "distributed.json"


def launched_distributed() -> bool:
    """True inside a process started by ``accelerate launch`` / ``torchrun`` / ``deepspeed``."""
    return int(os.environ.get("LOCAL_RANK", -1)) != -1 or int(os.environ.get("WORLD_SIZE", 1)) > 1


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def needs_cpu_deepspeed_state(args: Any) -> bool:
    """True when ``args`` asks for DeepSpeed on a machine without CUDA (the case accelerate gets wrong)."""
    return bool(getattr(args, "deepspeed", None)) and not _cuda_available()


def _set_use_configured_state(args: Any) -> None:
    """Set ``use_configured_state`` in whatever form ``accelerator_config`` has before ``__post_init__``."""
    from transformers.trainer_pt_utils import AcceleratorConfig

    current = args.accelerator_config
    if current is None:
        args.accelerator_config = {"use_configured_state": True}
    elif isinstance(current, dict):
        args.accelerator_config = {**current, "use_configured_state": True}
    elif isinstance(current, AcceleratorConfig):
        current.use_configured_state = True
    elif isinstance(current, str):  # a JSON file path: load it, so the flag can be added
        with open(current) as f:
            args.accelerator_config = {**json.load(f), "use_configured_state": True}
    else:
        raise TypeError(f"accelerator_config of type {type(current).__name__} is not supported")


def prepare_distributed(args: Any) -> bool:
    """Prepare process state for ``args`` before its ``__post_init__`` runs; True if anything was done.

    Only acts for DeepSpeed without CUDA in a launched process: sets ``ACCELERATE_USE_DEEPSPEED`` (so
    ``torchrun``/``deepspeed`` launches work like ``accelerate launch``), initialises the gloo process
    group through ``PartialState`` and makes the Trainer reuse it. Everywhere else it is a no-op.
    """
    if not needs_cpu_deepspeed_state(args):
        return False
    if not launched_distributed():
        # accelerate only runs DeepSpeed in a launched process; a single CPU process becomes a world of 1.
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    state = PartialState(backend="gloo")
    if state.distributed_type != DistributedType.DEEPSPEED:
        raise RuntimeError(
            f"a process state ({state.distributed_type}) was set up before the DeepSpeed config was built; "
            "build the training config before anything else creates an Accelerator or PartialState"
        )
    _set_use_configured_state(args)
    logger.info("CPU DeepSpeed: gloo process group, rank %d of %d", state.process_index, state.num_processes)
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Process groups teardown() destroyed, kept referenced (why: teardown's docstring).
_RETIRED_GROUPS: list[Any] = []


def teardown() -> None:
    """Barrier, then destroy the process group (if any), so every rank exits cleanly.

    The group object stays referenced: gloo's destructor joins its worker threads while holding the GIL,
    and it would run wherever the last reference goes (a DDP reducer freed with its trainer, right after
    this barrier). A worker thread still releasing the barrier's tensors needs that GIL: both wait for ever,
    after the run was saved (seen on 2-process CPU runs)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        _RETIRED_GROUPS.append(dist.group.WORLD)
        dist.destroy_process_group()


def started_by_launcher() -> bool:
    """True in a worker that ``torchrun`` / ``accelerate launch`` started (its elastic agent sets
    ``TORCHELASTIC_RUN_ID``); False in a process that only set up a world of one itself
    (``prepare_distributed``) or in pytest. ``LOCAL_WORLD_SIZE`` alone proves nothing: vLLM's CPU platform
    sets it in any process that builds an engine."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def finish_process(code: int = 0) -> int:
    """End a launched worker with ``code`` once its work is saved: tear down the process group, run the
    Python exit handlers, flush, and leave with ``os._exit`` (skipping C++ static destructors, where the
    abort happens). Outside a launched worker it only returns ``code``."""
    if not started_by_launcher():
        return code
    import atexit
    import sys

    try:
        teardown()
    except Exception:  # the group may be gone already; exiting matters more than a clean barrier
        logger.exception("teardown before exit failed")
    atexit._run_exitfuncs()  # what a normal exit runs (tensorboard / wandb writers, temp files)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe cannot be flushed; the exit code still must get out
            pass
    os._exit(code)


def _param_counts(model: Any) -> tuple[int, int, int, list[str]]:
    """(elements this rank holds, elements of the whole model, bytes this rank holds, their dtypes); the
    elements are equal unless ZeRO-3 or FSDP shards. The bytes show what a layout keeps: FSDP2 under
    bf16 mixed precision holds fp32 masters of the trainable parameters, ZeRO-3 bf16 partitions."""
    local = full = held = 0
    dtypes: set[str] = set()
    for p in model.parameters():
        if hasattr(p, "ds_numel"):  # ZeRO-3: ds_tensor is this rank's shard, ds_numel the full size
            mine, whole, dtype = int(p.ds_tensor.numel()), int(p.ds_numel), p.ds_tensor.dtype
        elif hasattr(p, "to_local"):  # FSDP2: a DTensor, numel() is the global size
            mine, whole, dtype = int(p.to_local().numel()), p.numel(), p.dtype
        else:
            mine, whole, dtype = p.numel(), p.numel(), p.dtype
        local, full, held = local + mine, full + whole, held + mine * dtype.itemsize
        dtypes.add(str(dtype).removeprefix("torch."))
    return local, full, held, sorted(dtypes)


def zero_stage(trainer: Any) -> int:
    """The ZeRO stage of a trainer's DeepSpeed config (0 without DeepSpeed)."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return 0
    return int(plugin.deepspeed_config.get("zero_optimization", {}).get("stage", 0))


def layout_of(trainer: Any) -> dict[str, Any]:
    """This run's layout as seen by every rank (a collective call: run it on all ranks)."""
    from accelerate.utils import gather_object

    acc = trainer.accelerator
    local, full, held, dtypes = _param_counts(trainer.model)
    mine = {
        "rank": acc.process_index,
        "local_rank": acc.local_process_index,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "param_elements_local": local,
        "param_elements_full": full,
        "param_bytes_local": held,
        "param_dtypes": dtypes,
    }
    ranks = gather_object([mine]) if acc.num_processes > 1 else [mine]
    return {
        "world_size": acc.num_processes,
        "distributed_type": str(acc.distributed_type).split(".")[-1],
        "backend": getattr(acc.state, "backend", None),
        "zero_stage": zero_stage(trainer),
        "fsdp_version": acc.state.fsdp_plugin.fsdp_version if acc.distributed_type.name == "FSDP" else None,
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
    }


def record_layout(trainer: Any, output_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Gather :func:`layout_of` and write it to ``output_dir/distributed.json`` on the main process."""
    layout = layout_of(trainer)
    if trainer.accelerator.is_main_process:
        path = Path(output_dir) / LAYOUT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(layout, indent=2))
    return layout


LAYOUTS = ("single", "ddp", "zero2", "zero3", "fsdp2")

# FSDP2 as TRL's recipes run it: one shard group per decoder/vision block (the model's _no_split_modules),
# sharded checkpoints (each rank writes its shard: fast, resumable on the same world size) and a full
# state dict only for the final save (see FinalOutputMixin), parameters resharded after each forward.
FSDP2_FLAGS = (
    "--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
    "--fsdp_state_dict_type", "SHARDED_STATE_DICT", "--fsdp_reshard_after_forward", "true",
    "--mixed_precision", "no",
)  # fmt: skip


def check_requested_layout(accelerator: Any) -> None:
    """Refuse a run whose launcher asked for FSDP but whose processes are plain DDP: accelerate turns FSDP
    on CPU processes into MULTI_CPU without a word, so each rank would hold (and save) the whole model."""
    if (
        os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
        and accelerator.distributed_type.name != "FSDP"
    ):
        raise RuntimeError(
            f"FSDP was asked for (ACCELERATE_USE_FSDP=true) but accelerate runs these processes as "
            f"{accelerator.distributed_type.name}: accelerate shards with FSDP on GPUs only; use ddp on CPU"
        )


def launch_command(
    layout: str,
    nproc: int,
    cli_args: list[str],
    deepspeed_config: str | os.PathLike[str] | None = None,
    port: int | None = None,
) -> list[str]:
    """``accelerate launch`` argv that runs ``r1vision <cli_args>`` in ``nproc`` processes on one node.

    ``ddp`` uses ``--multi_gpu``: with ``use_cpu: true`` in the training config that gives ``nproc`` gloo
    processes on a CPU-only machine (``--cpu`` would silently give one). ``zero2``/``zero3`` need a
    DeepSpeed JSON file; ``fsdp2`` is :data:`FSDP2_FLAGS`. A free port is picked so concurrent runs on one machine do not collide.
    """
    import sys

    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    if layout == "single":
        return [sys.executable, "-m", "r1vision.cli", *cli_args]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1"]
    cmd += ["--num_processes", str(nproc), "--main_process_port", str(port or _free_port())]
    if layout == "ddp":
        cmd += ["--multi_gpu", "--mixed_precision", "no"]
    elif layout == "fsdp2":
        cmd += list(FSDP2_FLAGS)
    else:
        if deepspeed_config is None:
            raise ValueError(f"layout {layout!r} needs a DeepSpeed config file")
        cmd += ["--use_deepspeed", "--deepspeed_config_file", str(deepspeed_config)]
        cmd += ["--zero3_init_flag", "true" if layout == "zero3" else "false"]
    return [*cmd, "-m", "r1vision.cli", *cli_args]
