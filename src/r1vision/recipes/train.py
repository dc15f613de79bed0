"""The SFT and GRPO runners behind ``r1vision sft`` / ``r1vision grpo``: task data → trainer → output."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from r1vision.tasks import get_task, resolve_rewards
from r1vision.trainer.distributed import record_layout, teardown
from r1vision.vision.budget import resolve_budget
from r1vision.vision.family import model_family_of

logger = logging.getLogger(__name__)


@dataclass
class ScriptArguments:
    """What to train on; the rest of the options are TRL's config fields (``GRPOConfig`` / ``SFTConfig``)."""

    model: str = field(default="", metadata={"help": "Hub id or local folder of a Qwen-VL model."})
    dataset: str = field(default="", metadata={"help": "Hub id, local folder or file of the task's data."})
    model_name_or_path: str | None = field(default=None, metadata={"help": "TRL's name for --model."})
    dataset_name: str | None = field(default=None, metadata={"help": "TRL's name for --dataset."})
    task: str = field(default="color", metadata={"help": "Task name (see `r1vision tasks`)."})
    dataset_split: str = field(default="train", metadata={"help": "Training split."})
    eval_split: str | None = field(default=None, metadata={"help": "Optional evaluation split."})
    max_train_rows: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "GRPO rewards, as TRL's --reward_funcs: names of the task's rewards, names registered "
            "with r1vision.tasks.register_reward, or dotted paths my_module.fn (default: all of the task's)."
        },
    )
    rewards: str | None = field(
        default=None, metadata={"help": "Older name of --reward_funcs (comma-separated)."}
    )
    task_options: str | None = field(
        default=None,
        metadata={"help": "JSON object of the task's options (`r1vision tasks --options T` lists them)."},
    )
    decoding_eval_splits: str | None = field(
        default=None,
        metadata={
            "help": "GRPO: comma-separated splits evaluated during training at several decodings "
            "(MAYE's scheme), logged to metrics.csv as eval_<split>/<decoding>/<metric>."
        },
    )
    decoding_eval_steps: int = field(
        default=0, metadata={"help": "Evaluate the splits every N steps (0: off)."}
    )
    decoding_eval_rows: int | None = field(default=None, metadata={"help": "Evaluate the first N rows only."})
    decoding_eval_decodings: str | None = field(
        default=None,
        metadata={
            "help": "JSON {name: {k, temperature, top_p}}; default MAYE's pass@8 T=1.0, pass@1 T=0.6, "
            "pass@1 T=0.01/top_p 0.001."
        },
    )

    def __post_init__(self) -> None:
        from r1vision.trainer.merge import resolve_model

        for alias, name in (("model_name_or_path", "model"), ("dataset_name", "dataset")):
            value = getattr(self, alias)
            if value and getattr(self, name) and value != getattr(self, name):
                raise ValueError(f"--{alias} and --{name} name the same thing; give one")
            if value:
                setattr(self, name, value)
        if self.rewards:
            self.reward_funcs = [*(self.reward_funcs or []), self.rewards]
        if not self.model:
            raise ValueError("--model is required (a Hub id or a local model folder)")
        self.model = resolve_model(self.model)  # a LoRA run's output_dir trains on from its merged model
        if not self.dataset:
            raise ValueError("--dataset is required (a Hub id, a local folder or file)")


def task_options(task: Any, raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """The user's task options (a JSON object, or a mapping from a YAML recipe), checked against the
    task's ``Options`` dataclass: an unknown name or a wrong type fails here, before any model loads."""
    import json

    if not raw:
        return {}
    opts = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(opts, dict):
        raise ValueError(f"--task_options must be a JSON object, got {raw!r}")
    task.parse_options(opts)
    return dict(opts)


def _datasets(script: ScriptArguments, config: Any):
    task = get_task(script.task)
    family = model_family_of(script.model)
    # The trainer resolves the same budget from the same inputs (vision.budget.resolve_budget), so SFT
    # targets and reward frames are written in the frame the model sees.
    budget = resolve_budget(family, config.min_pixels, config.max_pixels, processor=script.model)
    # Hand the resolved values to the trainer too: one resolution, not two that could disagree.
    config.min_pixels, config.max_pixels = budget.min_pixels, budget.max_pixels
    opts = dict(model_family=family, min_pixels=budget.min_pixels, max_pixels=budget.max_pixels)
    opts.update(task_options(task, script.task_options))
    train = task.load(script.dataset, split=script.dataset_split, **opts)
    if script.max_train_rows is not None:
        train = train.select(range(min(script.max_train_rows, len(train))))
    evald = task.load(script.dataset, split=script.eval_split, **opts) if script.eval_split else None
    return task, train, evald, opts


def run_grpo(script: ScriptArguments, config: Any) -> str:
    """Train with ``VisionGRPOTrainer`` on the task's rewards; returns the output directory."""
    from r1vision.trainer.grpo import VisionGRPOTrainer
    from r1vision.trainer.validation import check_generation_batch
    from r1vision.versions import check_generation_stack

    check_generation_stack(use_vllm=bool(getattr(config, "use_vllm", False)))
    task, train, evald, opts = _datasets(script, config)
    check_generation_batch(len(train), config)  # else TRL trains 0 steps and exits 0
    # Rewards that judge truncation need the stop tokens and the length limit (e.g. geometry's no_eos).
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(script.model)
    opts.setdefault(
        "eos_token_id", [t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None]
    )
    opts.setdefault("max_completion_length", config.max_completion_length)
    specs = resolve_rewards(task, script.reward_funcs, task.rewards(**opts))
    if config.reward_weights is None:
        config.reward_weights = [s.weight for s in specs]
    # GRPO generates the completions itself; an SFT target column would be passed to rewards as noise.
    train = train.remove_columns([c for c in ("completion",) if c in train.column_names])
    if evald is not None:
        evald = evald.remove_columns([c for c in ("completion",) if c in evald.column_names])
    trainer = VisionGRPOTrainer(
        script.model, [s.func for s in specs], args=config, train_dataset=train, eval_dataset=evald
    )
    if script.decoding_eval_splits and script.decoding_eval_steps > 0:
        trainer.add_callback(_decoding_eval(script, config, task, opts, trainer))
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    record_layout(trainer, config.output_dir)
    trainer.save_model(config.output_dir)
    trainer.processing_class.save_pretrained(config.output_dir)
    _finish_output(trainer, "grpo", script, config)
    teardown()
    return config.output_dir


def _finish_output(trainer: Any, kind: str, script: ScriptArguments, config: Any) -> None:
    """Run settings next to the weights; for LoRA, an absolute base path and a merged stand-alone model."""
    from r1vision.trainer.merge import (
        MERGED_SUBDIR,
        copy_stock_files,
        is_adapter_dir,
        merge_adapter,
        record_absolute_base,
    )
    from r1vision.trainer.run_info import run_settings, write_run_info

    if not trainer.args.should_save:
        return
    opts = task_options(get_task(script.task), script.task_options)
    write_run_info(config.output_dir, run_settings(kind, script, config, opts))
    copy_stock_files(script.model, config.output_dir)
    if is_adapter_dir(config.output_dir):
        record_absolute_base(config.output_dir, script.model)
        merged = merge_adapter(config.output_dir, os.path.join(config.output_dir, MERGED_SUBDIR))
        logger.info("LoRA adapter merged into a stand-alone model: %s", merged)


def _decoding_eval(script: ScriptArguments, config: Any, task: Any, opts: dict[str, Any], trainer: Any):
    import json

    from r1vision.trainer.decoding_eval import MAYE_DECODINGS, DecodingEvalCallback

    splits = {}
    for split in [s.strip() for s in (script.decoding_eval_splits or "").split(",") if s.strip()]:
        rows = task.load(script.dataset, split=split, **opts)
        n = len(rows) if script.decoding_eval_rows is None else min(script.decoding_eval_rows, len(rows))
        splits[split] = [rows[i] for i in range(n)]
    decodings = (
        json.loads(script.decoding_eval_decodings) if script.decoding_eval_decodings else MAYE_DECODINGS
    )
    return DecodingEvalCallback(
        trainer, task, splits, script.decoding_eval_steps, decodings,
        max_new_tokens=config.max_completion_length, seed=config.seed,
    )  # fmt: skip


def run_sft(script: ScriptArguments, config: Any) -> str:
    """Train with ``VisionSFTTrainer`` on the task's targets; returns the output directory."""
    from r1vision.trainer.sft import VisionSFTTrainer

    _, train, evald, _ = _datasets(script, config)
    keep = {"prompt", "completion", "images"}
    train = train.remove_columns([c for c in train.column_names if c not in keep])
    if evald is not None:
        evald = evald.remove_columns([c for c in evald.column_names if c not in keep])
    trainer = VisionSFTTrainer(script.model, args=config, train_dataset=train, eval_dataset=evald)
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    record_layout(trainer, config.output_dir)
    trainer.save_model(config.output_dir)
    _finish_output(trainer, "sft", script, config)
    teardown()
    return config.output_dir
