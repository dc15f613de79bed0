"""``r1vision_samples.jsonl``: which dataset rows each optimizer step trained on, as one hash per step.

Every process records the ``row_index`` of the rows it consumed (SFT: its micro-batches; GRPO: the prompts
of its generation rounds, repeats included); at the end of each step the indices of all processes are
gathered and the main process appends ``{"step", "rows", "sha256"}`` with the hash of the sorted list. The
hash does not depend on how a global batch is split over processes, so two runs with the same global
batch and data order have the same line for every step, whatever their process count: that is what proves
a resume on another layout continued the data order (``tests/trainer/test_distributed.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

ROW_INDEX = "row_index"
SAMPLES_FILE = "r1vision_samples.jsonl"


def with_row_index(dataset: Any) -> Any:
    """Add a ``row_index`` column (names rows in errors, keys the image cache, identifies the rows each step
    trained on); cheap for Arrow datasets. Streaming datasets and dicts are returned as they are."""
    if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "add_column"):
        return dataset
    if ROW_INDEX in getattr(dataset, "column_names", []) or not hasattr(dataset, "__len__"):
        return dataset
    return dataset.add_column(ROW_INDEX, list(range(len(dataset))))


def rows_hash(indices: list[int]) -> str:
    """The step's hash: order-free (sorted), so the split over processes does not change it."""
    return hashlib.sha256(json.dumps(sorted(int(i) for i in indices)).encode()).hexdigest()[:16]


def _gathered(indices: list[int]) -> list[int]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return indices
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, indices)  # every rank calls this at the same step end
    return [i for part in parts for i in part]


class SampleLogCallback(TrainerCallback):
    """Collects the row indices of a step (:meth:`record`) and writes the step's line (see module doc)."""

    def __init__(self) -> None:
        self.pending: list[int] = []

    def record(self, indices: Any) -> None:
        """Add the row indices this process just consumed (a list or a tensor)."""
        if hasattr(indices, "tolist"):
            indices = indices.tolist()
        self.pending.extend(int(i) for i in indices)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pending = []
        path = Path(args.output_dir) / SAMPLES_FILE
        if state.is_world_process_zero and path.is_file():
            # a resume into the same folder: lines past the checkpoint's step are written again
            kept = [line for line in path.read_text().splitlines() if _step(line) <= state.global_step]
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept))
            os.replace(tmp, path)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        indices, self.pending = _gathered(self.pending), []
        if not state.is_world_process_zero or not indices:
            return
        line = json.dumps({"step": state.global_step, "rows": len(indices), "sha256": rows_hash(indices)})
        path = Path(args.output_dir) / SAMPLES_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:  # one short line per step: an append, flushed at close
            f.write(line + "\n")


def _step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62  # a damaged line (a kill mid-write) is dropped on resume


def read_samples(folder: str | os.PathLike[str]) -> dict[int, str]:
    """``{step: hash}`` from a run folder's ``r1vision_samples.jsonl``."""
    path = Path(folder) / SAMPLES_FILE
    out = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        if _step(line) < 1 << 62:
            record = json.loads(line)
            out[int(record["step"])] = record["sha256"]
    return out
