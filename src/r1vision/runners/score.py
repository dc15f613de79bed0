"""Score given completions with a task's rewards, the way GRPO training calls them.

Training (TRL's ``GRPOTrainer._calculate_rewards``) calls every reward function with the prompts, the
completions as assistant messages (the prompts are conversations), the completions' token ids (ending
with the EOS token a finished generation has) and every other column of the rows; ``None`` becomes NaN,
and the total is the NaN-skipping weighted sum (``nansum``), NaN when every reward is NaN. This runner
does the same with the rows of a split, loaded by the task exactly as ``r1vision grpo`` loads them (same
model family, pixel budget, box frame and options), and the rewards as ``grpo`` resolves them
(``--reward_funcs``, presets, weights, each held to its range).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from r1vision.runners.train import reward_specs, run_context
from r1vision.tasks.base import RewardSpec, Task
from r1vision.tasks.registry import check_reward_weights
from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import vision_columns, with_vision_columns
from r1vision.vision.records import PredictionFileError, jsonl_lines


@dataclass
class ScoreItem:
    """One line of a completions file: the split row it answers and the completion text."""

    index: int
    completion: str


def read_completions(path: str | Path, n_rows: int) -> list[ScoreItem]:
    """The ``index``/``completion`` pairs of a JSON-lines file (other keys ignored); a line without them,
    or with an index outside the split's ``n_rows`` rows, is refused naming the line."""
    items = []
    for number, record in jsonl_lines(path):
        where = f"{path}:{number}"
        if not isinstance(record, dict) or "index" not in record or "completion" not in record:
            raise PredictionFileError(f"{where}: a line needs 'index' (row of the split) and 'completion'")
        index, completion = record["index"], record["completion"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_rows:
            raise PredictionFileError(f"{where}: index {index!r} is not a row of the split (0..{n_rows - 1})")
        if not isinstance(completion, str):
            raise PredictionFileError(f"{where}: 'completion' must be text, got {type(completion).__name__}")
        items.append(ScoreItem(index, completion))
    if not items:
        raise PredictionFileError(f"{path}: no completions")
    return items


def _conversational(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict) and "role" in prompt[0]


def score_items(
    specs: Sequence[RewardSpec],
    weights: Sequence[float],
    rows: Any,
    items: Sequence[ScoreItem],
    budget: PixelBudget,
    tokenizer: Any = None,
    eos_token_id: int | None = None,
    batch_size: int = 64,
    image_root: str | None = None,
) -> list[dict[str, Any]]:
    """Per item: ``index``, one key per reward with its unweighted value (NaN where it returned None) and
    ``total``, the weighted sum training uses. Rows get the trainer's image columns (images resized to
    ``budget`` and their sizes, :func:`~r1vision.vision.images.vision_columns`)."""
    out: list[dict[str, Any]] = []
    skip = {"prompt", "completion", "completion_ids"}
    prepared: dict[int, dict[str, Any]] = {}
    for start in range(0, len(items), batch_size):
        batch = items[start : start + batch_size]
        for item in batch:
            if item.index not in prepared:
                row = dict(rows[item.index])
                prepared[item.index] = with_vision_columns(row, vision_columns(row, budget, image_root))
        chosen = [prepared[item.index] for item in batch]
        prompts = [row["prompt"] for row in chosen]
        completions: list[Any] = [
            [{"role": "assistant", "content": item.completion}] if _conversational(p) else item.completion
            for item, p in zip(batch, prompts, strict=True)
        ]
        ids = None
        if tokenizer is not None:
            ids = [tokenizer(item.completion, add_special_tokens=False)["input_ids"] for item in batch]
            if eos_token_id is not None:
                ids = [[*row, eos_token_id] for row in ids]
        kwargs = {key: [row[key] for row in chosen] for key in chosen[0] if key not in skip}
        kwargs |= {"trainer_state": None, "log_extra": _ignore, "log_metric": _ignore}
        columns = []
        for spec in specs:
            values = spec.func(prompts=prompts, completions=completions, completion_ids=ids, **kwargs)
            columns.append([math.nan if v is None else float(v) for v in values])
        for k, item in enumerate(batch):
            values = [column[k] for column in columns]
            terms = [v * w for v, w in zip(values, weights, strict=True) if not math.isnan(v)]
            record = {"index": item.index, **{s.name: v for s, v in zip(specs, values, strict=True)}}
            record["total"] = math.fsum(terms) if terms else math.nan
            out.append(record)
    return out


def _ignore(*args: Any, **kwargs: Any) -> None:
    """``log_metric``/``log_extra`` for rewards called outside a trainer."""


def score_file(
    task: Task,
    opts: Any,
    model: str,
    dataset: str,
    split: str,
    completions: str | Path,
    reward_funcs: list[str] | None = None,
    reward_weights: list[float] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    max_completion_length: int | None = None,
) -> tuple[list[RewardSpec], list[float], list[dict[str, Any]]]:
    """Load the split as ``grpo`` does, resolve the rewards as ``grpo`` does, score every line of
    ``completions``; returns the rewards, their weights and the per-line records."""
    from transformers import AutoTokenizer

    script = SimpleNamespace(model=model)
    config = SimpleNamespace(
        min_pixels=min_pixels, max_pixels=max_pixels, max_completion_length=max_completion_length
    )
    run = run_context(script, config, stop_tokens=True)  # type: ignore[arg-type]
    rows = task.load(dataset, split, opts, run)
    items = read_completions(completions, len(rows))
    prepared = SimpleNamespace(task=task, opts=opts, run=run)
    specs = reward_specs(prepared, reward_funcs)  # type: ignore[arg-type]
    check_reward_weights(reward_weights, [s.name for s in specs])
    weights = [s.weight for s in specs] if reward_weights is None else list(reward_weights)
    tokenizer = AutoTokenizer.from_pretrained(model)
    eos = run.eos_token_ids[0] if run.eos_token_ids else None
    records = score_items(specs, weights, rows, items, run.pixel_budget(), tokenizer, eos)
    return specs, weights, records


def write_scores(path: str | Path, records: Sequence[dict[str, Any]]) -> None:
    """The per-line records as a JSON list (NaN written as null)."""
    clean = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in records
    ]
    Path(path).write_text(json.dumps(clean, indent=1))
