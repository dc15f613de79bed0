"""The ``r1vision infer`` runner: batched, data-parallel, resumable generation over a task's dataset."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from r1vision.generation.hf import generate
from r1vision.generation.sampling import SamplingOptions
from r1vision.tasks import task_class
from r1vision.tasks.base import RunContext, Task
from r1vision.trainer.merge import resolve_model
from r1vision.trainer.preemption import signals_held
from r1vision.trainer.run_info import VIDEO_KEYS, read_run_info
from r1vision.trainer.validation import DatasetValidationError, row_label
from r1vision.vision.budget import apply_budget_to_processor, resolve_budget
from r1vision.vision.family import model_family_of
from r1vision.vision.images import ImageLoadError, fit_to_budget, images_of_row, load_image
from r1vision.vision.records import PredictionMismatchError, RecordWriter, row_id
from r1vision.vision.video import VideoBudget, VideoLoadError, load_clip, videos_of_row

logger = logging.getLogger(__name__)


def run_inference(
    task: Task,
    opts: Any,
    model_path: str,
    dataset: str,
    out_dir: str | Path,
    split: str = "test",
    batch_size: int = 8,
    options: SamplingOptions | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    limit: int | None = None,
    image_root: str | None = None,
    progress: bool = True,
    backend: str = "hf",
    max_model_len: int | None = None,
    video: dict[str, Any] | None = None,
) -> Path:
    """Generate for every row of ``dataset`` not yet in ``out_dir`` and append records as they finish.

    Rows are dealt round-robin to the processes of ``accelerate launch`` / ``torchrun``; each writes its own
    shard. ``backend``: ``"hf"`` (transformers ``generate``) or ``"vllm"`` (an in-process vLLM engine with
    the same pixel budget; each prompt's image tokens are checked against the processor's).
    ``opts`` (the task's parsed ``Options``, e.g. ``prompt="closed"``) build the prompts the model was
    trained with. ``video``: the ``video_*`` budget options (:class:`~r1vision.vision.video.VideoBudget`;
    both backends sample and resize video rows under it). Returns ``out_dir``.
    """
    if backend not in ("hf", "vllm"):
        raise ValueError(f"backend={backend!r}; choose 'hf' or 'vllm'")
    import torch
    from accelerate import PartialState
    from tqdm.auto import tqdm
    from transformers import AutoModelForImageTextToText, AutoProcessor

    options = options or SamplingOptions()
    state = PartialState()
    model_path = resolve_model(model_path)  # a LoRA adapter folder: its merged stand-alone model
    family = model_family_of(model_path)
    # Resolved once, before the rows are built, so prompts, targets and the processor share one frame.
    budget = resolve_budget(family, min_pixels, max_pixels, processor=model_path)
    run = RunContext(family, budget, max_completion_length=options.max_new_tokens)
    rows = task.load(dataset, split, opts, run)
    n = len(rows) if limit is None else min(limit, len(rows))
    video_budget = VideoBudget.for_family(
        family, **{k.removeprefix("video_"): v for k, v in (video or {}).items()}
    )
    rank, world = process_shard(state)
    settings = {
        "model": model_path,
        "dataset": str(dataset),
        "split": split,
        "task": task.name,
        "task_options": _json_options(opts),
        "sampling": options.record(),
        "backend": backend,
        "min_pixels": budget.min_pixels,
        "max_pixels": budget.max_pixels,
        "model_family": family,
    }
    if n and videos_of_row(rows[0]):
        settings["video"] = {k: v for k, v in video_budget.__dict__.items() if k not in ("factor",)}
    check_or_write_settings(out_dir, settings, write=rank == 0)
    writer = RecordWriter(out_dir, rank=rank)
    todo = [i for i in range(rank, n, world) if i not in writer.done]
    if not todo:
        logger.info("rank %d: nothing left to do in %s", rank, out_dir)
    else:
        processor = AutoProcessor.from_pretrained(model_path)
        apply_budget_to_processor(processor, budget)
        if backend == "vllm":
            from r1vision.generation.vllm_engine import VLLMGenerator

            max_images = max([len(images_of_row(rows[i])) for i in todo] + [1])
            max_videos = max(len(videos_of_row(rows[i])) for i in todo)
            model = VLLMGenerator(
                model_path,
                processor,
                budget,
                max_images,
                max_model_len=max_model_len,
                max_videos=max_videos,
                video_budget=video_budget if max_videos else None,
            )
        else:
            model = (
                AutoModelForImageTextToText.from_pretrained(model_path, dtype="auto").to(state.device).eval()
            )
        # Slurm's --signal / a preemption's SIGTERM: finish the batch, then stop; after the last one, finish
        with signals_held() as stop:
            bar = tqdm(total=len(todo), desc=f"infer[{rank}]", disable=not progress)
            for start in range(0, len(todo), batch_size):
                if stop.received:
                    bar.close()
                    raise InferenceStopped(
                        f"{stop.received} received: stopped after {start} of {len(todo)} rows of rank {rank}; "
                        f"every finished row is in {out_dir}, the same command continues"
                    )
                batch_idx = todo[start : start + batch_size]
                batch = [rows[i] for i in batch_idx]
                # Seed per batch from the row indices, so a resumed run samples what the first attempt would have.
                batch_options = SamplingOptions(**{**options.__dict__, "seed": options.seed + batch_idx[0]})
                originals = [
                    _row_images(row, i, image_root, split) for i, row in zip(batch_idx, batch, strict=True)
                ]
                resized = [[fit_to_budget(img, budget) for img in imgs] for imgs in originals]
                clips = [
                    _row_clips(row, i, image_root, split, video_budget)
                    for i, row in zip(batch_idx, batch, strict=True)
                ]
                if backend == "vllm":
                    texts = model.generate(batch, resized, batch_options, videos=clips)
                else:
                    texts = generate(
                        model, processor, batch, budget, batch_options, images=resized, videos=clips
                    )
                for i, row, samples, orig, res, row_clips in zip(
                    batch_idx, batch, texts, originals, resized, clips, strict=True
                ):
                    record = {
                        "index": i,
                        "id": row_id(row, i),
                        "completion": samples[0],
                        "model_family": family,
                    }
                    if row.get("image_id") is not None:
                        record["image_id"] = row["image_id"]
                    if orig:  # the frame coordinate answers are in (see the task's box convention)
                        record["original_image_size"] = list(orig[0].size)
                        record["image_size"] = list(res[0].size)
                    if row_clips:  # frames x width x height the model saw, and of the source
                        record["video_size"] = [len(row_clips[0]), *row_clips[0].frame_size]
                        record["original_video_size"] = [
                            row_clips[0].total_num_frames,
                            *row_clips[0].original_size,
                        ]
                    if len(samples) > 1:
                        record["samples"] = samples
                    writer.write(record)
                bar.update(len(batch_idx))
            bar.close()
            del model
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    # Only several accelerate processes have anyone to wait for: under a bare torchrun on CPU there is no
    # process group, and in one process a training run before this may have destroyed its group of one.
    if state.num_processes > 1 and state.num_processes == world:
        state.wait_for_everyone()
    return Path(out_dir)


class InferenceStopped(Exception):
    """``infer`` stopped between batches on a preemption signal; the rows written so far are complete."""


def _row_images(row: dict[str, Any], index: int, image_root: Any, split: str) -> list[Any]:
    """The row's images, decoded; a missing or corrupt one stops the run naming the split and row (the
    records written so far stay, so the run resumes once the file is fixed)."""
    try:
        return [load_image(v, image_root) for v in images_of_row(row)]
    except ImageLoadError as exc:
        raise DatasetValidationError(f"split {split!r}, {row_label(row, index)}: {exc}") from exc


def _row_clips(row: dict[str, Any], index: int, root: Any, split: str, budget: VideoBudget) -> list[Any]:
    """The row's videos, sampled and resized under ``budget``; a missing or corrupt one stops the run naming
    the split and row, as images do."""
    try:
        return [load_clip(v, budget, root) for v in videos_of_row(row)]
    except VideoLoadError as exc:
        raise DatasetValidationError(f"split {split!r}, {row_label(row, index)}: {exc}") from exc


SETTINGS_FILE = "r1vision_infer.json"
# What must not change between a killed run and its resumption: the rows and how they are decoded.
_SAME_ON_RESUME = (
    "dataset",
    "split",
    "task",
    "task_options",
    "sampling",
    "min_pixels",
    "max_pixels",
    "video",
)


def _json_options(opts: Any) -> dict[str, Any]:
    import dataclasses
    import json

    values = dataclasses.asdict(opts) if dataclasses.is_dataclass(opts) else dict(opts or {})
    return json.loads(json.dumps(values, default=str))


def check_or_write_settings(out_dir: str | Path, settings: dict[str, Any], write: bool = True) -> None:
    """Record how the predictions in ``out_dir`` are made (``r1vision_infer.json``); a folder that already
    holds predictions made otherwise (other rows, prompts or decoding) is refused, naming what differs."""
    import json

    path = Path(out_dir) / SETTINGS_FILE
    if path.is_file():
        try:
            before = json.loads(path.read_text())
        except ValueError:  # cut by a kill or a full disk (it is written atomically now): rewritten below
            before = {}
        changed = [k for k in _SAME_ON_RESUME if k in before and before[k] != settings.get(k)]
        if changed and any(Path(out_dir).glob("shard-*.jsonl")):
            details = "; ".join(f"{k}: {before[k]!r} -> {settings.get(k)!r}" for k in changed)
            raise PredictionMismatchError(
                f"{out_dir} holds predictions made with other settings ({details}); resume with the same "
                "command, or choose another --output_dir"
            )
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # atomic: processes of one run write it too
        tmp.write_text(json.dumps(settings, indent=2, sort_keys=True))
        os.replace(tmp, path)


def process_shard(state: Any) -> tuple[int, int]:
    """(rank, world size) of this process: accelerate's, or torchrun's ``RANK``/``WORLD_SIZE``.

    On CPU, ``torchrun --nproc N`` starts N processes that accelerate each sees as a single process 0
    (no process group is set up), so all of them would write every row into shard 0.
    """
    import os

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if state.num_processes > 1 or world <= 1:
        return state.process_index, state.num_processes
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is outside WORLD_SIZE={world}")
    return rank, world


def inference_settings(
    model_path: str,
    task: str | None = None,
    max_new_tokens: int | None = None,
    task_options: dict[str, Any] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    video: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What ``infer`` runs with, and where each value came from (``sources``, for the log line).

    The task, its options and the pixel budget: given explicitly, else the training run's saved settings
    (``r1vision_run.json`` when ``model_path`` is an r1vision output; options given on the command line
    are merged into the run's). ``max_new_tokens``: given, else the
    task's inference default (``Task.max_new_tokens``): a run's training ``max_completion_length`` is a
    rollout budget, often shorter than a full answer (1,024 tokens cut a ~1,300-token VG150 graph).
    """

    run = read_run_info(model_path)
    sources: dict[str, str] = {}
    if task is None:
        task = run.get("task")
        if not task:
            raise ValueError(
                f"the task is required: {model_path} has no r1vision_run.json naming it; pass --task"
            )
        sources["task"] = "run"
    same_task = run.get("task") == task
    saved = dict(run.get("task_options") or {}) if same_task else {}
    if task_options is None:
        task_options = saved
        sources["task_options"] = "run" if saved else "default"
    elif saved:  # the command line's options on top of the run's, option by option
        task_options = {**saved, **task_options}
        sources["task_options"] = "run + command line"
    if max_new_tokens is None:
        max_new_tokens = task_class(task).max_new_tokens
        sources["max_new_tokens"] = f"task {task!r} default"
    else:
        sources["max_new_tokens"] = "command line"
    if same_task:
        if min_pixels is None and run.get("min_pixels") is not None:
            min_pixels, sources["min_pixels"] = int(run["min_pixels"]), "run"
        if max_pixels is None and run.get("max_pixels") is not None:
            max_pixels, sources["max_pixels"] = int(run["max_pixels"]), "run"
    video = {k: v for k, v in (video or {}).items() if v is not None}
    if same_task:  # the video budget option by option: the command line's, else the run's
        from_run = {k: run[k] for k in VIDEO_KEYS if run.get(k) is not None and k not in video}
        if from_run:
            sources["video"] = "run" + (" + command line" if video else "")
        video = {**from_run, **video}
    return {
        "video": video,
        "task": task,
        "task_options": task_options,
        "max_new_tokens": max_new_tokens,
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "sources": sources,
    }
