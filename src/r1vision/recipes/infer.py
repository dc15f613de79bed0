"""The ``r1vision infer`` runner: batched, data-parallel, resumable generation over a task's dataset."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from r1vision.generation.hf import SamplingOptions, generate
from r1vision.tasks.base import Task
from r1vision.vision.budget import apply_budget_to_processor, resolve_budget
from r1vision.vision.family import model_family_of
from r1vision.vision.images import fit_to_budget, images_of_row, load_image
from r1vision.vision.records import RecordWriter, row_id

logger = logging.getLogger(__name__)


def run_inference(
    task: Task,
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
    task_options: dict[str, Any] | None = None,
) -> Path:
    """Generate for every row of ``dataset`` not yet in ``out_dir`` and append records as they finish.

    Rows are dealt round-robin to the processes of ``accelerate launch`` / ``torchrun``; each writes its own
    shard. ``backend``: ``"hf"`` (transformers ``generate``) or ``"vllm"`` (an in-process vLLM engine with
    the same pixel budget; each prompt's image tokens are checked against the processor's).
    ``task_options`` (the task's ``Options``, e.g. ``{"prompt": "closed"}``) build the prompts the model
    was trained with. Returns ``out_dir``.
    """
    if backend not in ("hf", "vllm"):
        raise ValueError(f"backend={backend!r}; choose 'hf' or 'vllm'")
    import torch
    from accelerate import PartialState
    from tqdm.auto import tqdm
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from r1vision.trainer.merge import resolve_model

    options = options or SamplingOptions()
    state = PartialState()
    model_path = resolve_model(model_path)  # a LoRA adapter folder: its merged stand-alone model
    family = model_family_of(model_path)
    # Resolved once, before the rows are built, so prompts, targets and the processor share one frame.
    budget = resolve_budget(family, min_pixels, max_pixels, processor=model_path)
    rows = task.load(
        dataset,
        split=split,
        model_family=family,
        min_pixels=budget.min_pixels,
        max_pixels=budget.max_pixels,
        **(task_options or {}),
    )
    n = len(rows) if limit is None else min(limit, len(rows))
    rank, world = process_shard(state)
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
            model = VLLMGenerator(model_path, processor, budget, max_images, max_model_len=max_model_len)
        else:
            model = (
                AutoModelForImageTextToText.from_pretrained(model_path, dtype="auto").to(state.device).eval()
            )
        bar = tqdm(total=len(todo), desc=f"infer[{rank}]", disable=not progress)
        for start in range(0, len(todo), batch_size):
            batch_idx = todo[start : start + batch_size]
            batch = [rows[i] for i in batch_idx]
            # Seed per batch from the row indices, so a resumed run samples what the first attempt would have.
            batch_options = SamplingOptions(**{**options.__dict__, "seed": options.seed + batch_idx[0]})
            originals = [[load_image(v, image_root) for v in images_of_row(row)] for row in batch]
            resized = [[fit_to_budget(img, budget) for img in imgs] for imgs in originals]
            if backend == "vllm":
                texts = model.generate(batch, resized, batch_options)
            else:
                texts = generate(model, processor, batch, budget, batch_options, images=resized)
            for i, row, samples, orig, res in zip(batch_idx, batch, texts, originals, resized, strict=True):
                record = {"index": i, "id": row_id(row, i), "completion": samples[0], "model_family": family}
                if row.get("image_id") is not None:
                    record["image_id"] = row["image_id"]
                if orig:  # the frame coordinate answers are in (see the task's box convention)
                    record["original_image_size"] = list(orig[0].size)
                    record["image_size"] = list(res[0].size)
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


# The longest answer each task's model writes, in real Qwen tokens: infer's default when the model's own
# run settings do not give one. sgg: a VG150 graph of 20 objects + 30 relations is ~1,323 tokens; svg:
# figures of 1-2 kB and VFig's 4,096-token completions; geometry: MAYE's 2,048.
TASK_MAX_NEW_TOKENS = {"sgg": 2048, "sgg_psg": 2048, "geometry": 2048, "svg": 4096, "color": 16}
DEFAULT_MAX_NEW_TOKENS = 1024


def inference_settings(
    model_path: str,
    task: str | None = None,
    max_new_tokens: int | None = None,
    task_options: dict[str, Any] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> dict[str, Any]:
    """What ``infer`` runs with: each value given explicitly, else the training run's saved settings
    (``r1vision_run.json`` when ``model_path`` is an r1vision output), else the task's default.

    Returns ``task``, ``task_options``, ``max_new_tokens``, ``min_pixels``, ``max_pixels`` and ``sources``
    (where each came from, for the log line).
    """
    from r1vision.trainer.run_info import read_run_info

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
    if task_options is None or (not task_options and same_task and run.get("task_options")):
        task_options = dict(run.get("task_options") or {}) if same_task else {}
        sources["task_options"] = "run" if same_task and task_options else "default"
    if max_new_tokens is None:
        if same_task and run.get("max_completion_length"):
            max_new_tokens, sources["max_new_tokens"] = int(run["max_completion_length"]), "run"
        else:
            max_new_tokens = TASK_MAX_NEW_TOKENS.get(task, DEFAULT_MAX_NEW_TOKENS)
            sources["max_new_tokens"] = "task"
    if same_task:
        if min_pixels is None and run.get("min_pixels") is not None:
            min_pixels, sources["min_pixels"] = int(run["min_pixels"]), "run"
        if max_pixels is None and run.get("max_pixels") is not None:
            max_pixels, sources["max_pixels"] = int(run["max_pixels"]), "run"
    return {
        "task": task,
        "task_options": task_options,
        "max_new_tokens": max_new_tokens,
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "sources": sources,
    }
