"""What a ``checkpoint-N`` folder must hold to be resumed from, read without importing torch or the trainers
(the pre-check asks it before anything heavy loads; ``trainer/checkpoint.py`` resumes with it)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "pytorch_model_fsdp.bin",  # accelerate's FSDP full state dict
)
# accelerate's FSDP sharded state dict: torch.distributed.checkpoint writes .metadata after every shard
_FSDP_SHARDED = re.compile(r"^pytorch_model_fsdp_\d+$")


def checkpoint_problem(path: str) -> str | None:
    """Why the checkpoint folder ``path`` cannot be resumed from, or ``None`` when it is complete.

    ``Trainer`` writes ``trainer_state.json`` after the weights, optimizer, scheduler and RNG states, so a
    folder without a readable one was cut by a kill during the save; weights must be there too (a file, or
    DeepSpeed's ``global_step*`` folder named by ``latest``, or FSDP's ``pytorch_model_fsdp_0`` shard folder
    with its ``.metadata``).
    """
    state = os.path.join(path, "trainer_state.json")
    if not os.path.isfile(state):
        return "no trainer_state.json (a save was interrupted)"
    try:
        with open(state) as f:
            if "global_step" not in json.load(f):
                return "trainer_state.json has no global_step"
    except (OSError, ValueError):
        return "trainer_state.json is not readable JSON (a save was interrupted)"
    if any(os.path.isfile(os.path.join(path, name)) for name in _WEIGHTS):
        return None
    if any(
        _FSDP_SHARDED.match(name) and os.path.isfile(os.path.join(path, name, ".metadata"))
        for name in os.listdir(path)
    ):
        return None
    latest = os.path.join(path, "latest")
    if os.path.isfile(latest):
        with open(latest) as f:
            if os.path.isdir(os.path.join(path, f.read().strip())):
                return None
    return "no model weights"


def newest_complete_checkpoint(output_dir: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The newest complete ``checkpoint-N`` folder of ``output_dir`` (None if there is none), and the newer
    ones skipped with the reason (:func:`checkpoint_problem`)."""
    found = []
    if os.path.isdir(output_dir):
        for name in os.listdir(output_dir):
            match = _CHECKPOINT.match(name)
            if match and os.path.isdir(os.path.join(output_dir, name)):
                found.append((int(match.group(1)), os.path.join(output_dir, name)))
    skipped = []
    for _, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def resume_problem(path: str) -> str | None:
    """Why ``--resume_from_checkpoint PATH`` cannot resume: no such folder, or an incomplete checkpoint."""
    if not os.path.isdir(path):
        return "no such checkpoint folder" + (" (a file is there)" if os.path.exists(path) else "")
    return checkpoint_problem(path)


class DiskFullError(OSError):
    """A save ran out of disk space; the message names the folder and the space left."""


# What torch and safetensors say when a write fails for lack of space (the errno is often lost on the way).
_WRITE_FAILURES = ("No space left", "file write failed", "unexpected pos", "iostream error", "Disk quota")


@contextmanager
def disk_errors_named(folder: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn a failed write into :class:`DiskFullError` naming ``folder`` and its free space, when the disk
    is what failed: torch reported "iostream error" / "unexpected pos", never "No space left on device".
    Other errors pass through unchanged. The checkpoint half-written stays incomplete (no
    ``trainer_state.json``), so ``--resume_from_checkpoint last`` skips it once space is freed."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        message = str(exc)
        full = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(
            pattern in message for pattern in _WRITE_FAILURES
        )
        if not full:
            raise
        target = os.path.abspath(folder)
        probe = target
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        free = shutil.disk_usage(probe or "/").free / 2**20
        raise DiskFullError(
            errno.ENOSPC,
            f"No space left on device while saving {what} in {target} ({free:.0f} MiB free): free space, then "
            "resume with --resume_from_checkpoint last",
        ) from exc


LAYOUT_FILE = "r1vision_layout.json"  # in each checkpoint folder: the layout that wrote it
# A checkpoint taken between the optimizer steps that one generation feeds: each process's share of it.
BUFFER_FILE = "rollout_buffer_rank{rank}.pt"
_BUFFER = re.compile(r"rollout_buffer_rank\d+\.pt")


def save_generation(state: object, checkpoint: str, rank: int) -> None:
    """Write this process's share of an interrupted generation into ``checkpoint`` (atomically: a kill
    mid-write leaves no torn file, so the resume samples that generation anew instead of failing)."""
    import torch  # heavy: the pre-check reads this module without it

    os.makedirs(checkpoint, exist_ok=True)
    path = os.path.join(checkpoint, BUFFER_FILE.format(rank=rank))
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def saved_generation(checkpoint: str, rank: int, processes: int) -> tuple[str | None, str | None]:
    """``(this process's generation file to load, why none is loaded)`` for a resume from ``checkpoint``;
    ``(None, None)`` when it holds no generation (saved at a generation boundary).

    The shares were split for the process count that saved them; on another count they fit no process.
    Every process must decide alike (one loading its share while another samples anew would hang the
    gathers), so the decision rests on the set of files, which all processes see."""
    names = (
        {n for n in os.listdir(checkpoint) if _BUFFER.fullmatch(n)} if os.path.isdir(checkpoint) else set()
    )
    if not names:
        return None, None
    if names != {BUFFER_FILE.format(rank=r) for r in range(processes)}:
        return None, (
            f"{checkpoint} was saved between the updates of a generation by {len(names)} processes: its samples "
            f"are split by process, so this run of {processes} samples that generation anew"
        )
    return os.path.join(checkpoint, BUFFER_FILE.format(rank=rank)), None


def needs_universal(checkpoint: str, now: dict) -> bool:
    """Whether ``checkpoint`` is a ZeRO checkpoint of another process count than ``now``'s, resumed under
    ZeRO: DeepSpeed then loads it through its universal format
    (:func:`r1vision.trainer.checkpoint.to_universal`)."""
    try:
        with open(os.path.join(checkpoint, LAYOUT_FILE)) as f:
            then = json.load(f)
    except (OSError, ValueError):
        return False
    return bool(
        then.get("zero_stage") in (1, 2, 3)
        and now.get("zero_stage")
        and int(then.get("world_size", 1)) != int(now["world_size"])
    )


def layout_change_problem(checkpoint: str, now: dict) -> str | None:
    """Why resuming ``checkpoint`` with layout ``now`` (``world_size``, ``per_device_train_batch_size``,
    ``gradient_accumulation_steps``, ``zero_stage``, ``fsdp``; text-to-image runs add
    ``generation_images``) would not continue the same run, or None.

    The samplers draw global batches from the seed, and accelerate splits each global batch over the
    processes, so any process count with the same global batch continues the same data order; another
    global batch does not (refused unless ``allow_layout_change``). ZeRO checkpoints hold one optimizer
    shard per process: they resume on another count under ZeRO through DeepSpeed's universal format
    (``needs_universal``); FSDP ones under FSDP on any count (torch's distributed checkpoint re-shards them
    at load). A checkpoint without the file
    (written before it existed) is judged by its per-process RNG files."""
    try:
        with open(os.path.join(checkpoint, LAYOUT_FILE)) as f:
            then = json.load(f)
    except (OSError, ValueError):
        rng = (
            [n for n in os.listdir(checkpoint) if n.startswith("rng_state")]
            if os.path.isdir(checkpoint)
            else []
        )
        if not rng:
            return None
        then = {"world_size": max(1, sum(n.startswith("rng_state_") for n in rng))}
    world, was = int(now.get("world_size", 1)), int(then.get("world_size", 1))
    if then.get("fsdp") and not now.get("fsdp"):
        return (
            f"{checkpoint} is an FSDP checkpoint of {was} processes (sharded: one file per process); resume it "
            f"under FSDP (--accelerate_config fsdp2), which re-shards it for {world}"
        )
    if then.get("zero_stage") and world != was and not now.get("zero_stage"):
        return (
            f"{checkpoint} is a ZeRO-{then['zero_stage']} checkpoint of {was} processes (one optimizer shard "
            f"each); resume it under DeepSpeed ZeRO (--zero {then['zero_stage']}), which converts it to "
            f"{world} processes, or on {was} processes"
        )
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps")
    if (
        world == was and all(then.get(k, now.get(k)) == now.get(k) for k in keys)
    ) or "global_batch" not in then:
        return None
    global_now = world * int(now["per_device_train_batch_size"]) * int(now["gradient_accumulation_steps"])
    if global_now == int(then["global_batch"]):
        images = then.get("generation_images"), now.get("generation_images")
        if None in images or images[0] == images[1]:
            return None
        # text-to-image: the prompts each generation draws follow the generation batch
        return (
            f"{checkpoint} sampled generations of {images[0]} images ({was} processes x "
            f"{then['per_device_train_batch_size']} x steps_per_generation {then.get('steps_per_generation')}), "
            f"this run samples {images[1]} ({world} x {now['per_device_train_batch_size']} x "
            f"{now.get('steps_per_generation')}); set --steps_per_generation so they match (the same prompts "
            "follow), or pass --allow_layout_change true to continue with other generations"
        )
    return (
        f"{checkpoint} was trained with a global batch of {then['global_batch']} ({was} processes x "
        f"{then['per_device_train_batch_size']} x {then['gradient_accumulation_steps']} accumulation), this run "
        f"has {global_now} ({world} x {now['per_device_train_batch_size']} x {now['gradient_accumulation_steps']}); "
        "set --per_device_train_batch_size / --gradient_accumulation_steps so they match (the same data order "
        "follows), or pass --allow_layout_change true to continue with other batches"
    )
