"""The final output folder, the same from the command line and the Python API.

``trainer.save_model()`` (the final save, not a checkpoint) writes the weights and processor, then
``r1vision_run.json`` (the runner's full settings, or what the trainer itself knows), the stock files the
base model had, a merged stand-alone model for a LoRA run (``merged/``) and a model card (``README.md``);
with ``--push_to_hub`` it then uploads that complete folder, once. transformers would push from inside
``save_model``, before the run settings and the merged model exist, and creates the Hub repository when
the trainer is built; r1vision takes the flag over (:func:`take_over_push`) so the run neither touches the
network before training nor uploads half a folder.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path
from typing import Any

from r1vision.trainer.merge import (
    MERGED_SUBDIR,
    copy_stock_files,
    is_adapter_dir,
    merge_adapter,
    record_absolute_base,
)
from r1vision.trainer.run_info import write_run_info
from r1vision.versions import TESTED, installed
from r1vision.vision.hub_layout import write_hub_layout

logger = logging.getLogger(__name__)

# Never uploaded: intermediate state and local logs.
IGNORE_ON_UPLOAD = ["checkpoint-*", "checkpoint-*/**", "runs/**", "*.pt", "*.pth", "training_args.bin"]


def take_over_push(args: Any) -> None:
    """Move ``push_to_hub`` to ``args.push_final_to_hub`` so transformers does not push mid-way."""
    if getattr(args, "push_to_hub", False):
        args.push_final_to_hub = True
        args.push_to_hub = False


def trainer_settings(trainer: Any, kind: str) -> dict[str, Any]:
    """What a trainer knows about its run, for ``r1vision_run.json`` when no runner supplied more."""
    args = trainer.args
    model = getattr(trainer.model, "base_model", trainer.model)
    config = getattr(getattr(model, "model", model), "config", None) or getattr(trainer.model, "config", None)
    names = list(getattr(trainer, "reward_func_names", []) or [])
    weights = getattr(trainer, "reward_weights", None)
    weights = (
        [float(w) for w in weights.tolist()] if weights is not None and hasattr(weights, "tolist") else []
    )
    settings: dict[str, Any] = {
        "kind": kind,
        "task": getattr(trainer, "r1vision_task", None),
        "task_options": {},
        "reward_funcs": names or None,
        "reward_weights": dict(zip(names, weights, strict=False)) or None,
        "base_model": getattr(config, "_name_or_path", None),
        "min_pixels": getattr(args, "min_pixels", None),
        "max_pixels": getattr(args, "max_pixels", None),
        "lora_r": getattr(args, "lora_r", 0),
        "source": "python api",
    }
    for key in ("max_completion_length", "max_length", "temperature", "top_p", "num_generations"):
        if hasattr(args, key):
            settings[key] = getattr(args, key)
    return settings


def final_metrics(output_dir: str | os.PathLike) -> dict[str, str]:
    """The last logged value of each column of ``metrics.csv`` (empty cells skipped)."""
    path = Path(output_dir) / "metrics.csv"
    if not path.is_file():
        return {}
    last: dict[str, str] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            last.update({k: v for k, v in row.items() if v not in ("", None)})
    return last


def model_card(settings: dict[str, Any], metrics: dict[str, str], repo_id: str | None = None) -> str:
    """A Hub model card: what was trained from what, on which data and task, with which rewards, recipe and
    versions, and where it ended."""

    base, dataset = settings.get("base_model") or "?", settings.get("dataset") or "?"
    lines = [
        "---",
        f"base_model: {base}" if base != "?" else "base_model: null",
        "library_name: transformers",
        "pipeline_tag: image-text-to-text",
        "tags: [r1vision, trl, " + str(settings.get("kind") or "train") + "]",
        "---",
        "",
        f"# {repo_id or Path(str(settings.get('output_dir') or 'model')).name}",
        "",
        f"Trained with r1vision ({settings.get('kind')}, TRL's trainer for vision-language "
        f"models) from `{base}` on `{dataset}` (split `{settings.get('dataset_split') or '?'}`).",
        "",
        "| | |",
        "|---|---|",
        f"| task | `{settings.get('task')}` |",
        f"| task options | `{json.dumps(settings.get('task_options') or {}, sort_keys=True)}` |",
    ]
    weights = settings.get("reward_weights") or {}
    if weights:
        lines.append("| rewards (weight) | " + ", ".join(f"`{k}` ({v:g})" for k, v in weights.items()) + " |")
    lines += [
        f"| recipe | `{settings.get('recipe') or '(command line)'}` |",
        f"| pixel budget | min {settings.get('min_pixels')}, max {settings.get('max_pixels')} |",
        f"| LoRA rank | {settings.get('lora_r') or 'full fine-tuning'} |",
        "| versions | "
        + ", ".join(f"{k} {installed(k)}" for k in ["r1vision", *TESTED] if installed(k))
        + " |",
    ]
    if metrics:
        keep = [
            k for k in metrics if k in ("step", "loss", "reward", "reward_std") or k.startswith("rewards/")
        ]
        lines += ["", "Final logged metrics (`metrics.csv`, last value of each):", ""]
        lines += [f"- `{k}`: {metrics[k]}" for k in keep]
    lines += [
        "",
        "`r1vision_run.json` holds every setting; `merged/` (LoRA runs) loads without r1vision.",
        "",
    ]
    return "\n".join(lines)


def push_folder(output_dir: str | os.PathLike, args: Any) -> str:
    """Upload the finished ``output_dir`` to ``args.hub_model_id`` (default: the folder's name)."""
    from huggingface_hub import HfApi

    repo_id = getattr(args, "hub_model_id", None) or Path(output_dir).resolve().name
    api = HfApi(token=getattr(args, "hub_token", None))
    repo = api.create_repo(repo_id, private=bool(getattr(args, "hub_private_repo", False)), exist_ok=True)
    repo_id = getattr(repo, "repo_id", repo_id)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=str(output_dir),
        commit_message="r1vision: final model, run settings and card",
        ignore_patterns=IGNORE_ON_UPLOAD,
        revision=getattr(args, "hub_revision", None),
    )
    logger.warning("pushed %s to the Hub as %s", output_dir, repo_id)
    return repo_id


def t2i_model_card(settings: dict[str, Any], metrics: dict[str, str], repo_id: str | None = None) -> str:
    """The card of a text-to-image run: what was trained from what, and the stock diffusers lines that load
    the LoRA and draw an image as the run's evaluation did."""

    base = settings.get("base_model") or "?"
    where = repo_id or "OUTPUT_DIR"
    side = settings.get("resolution") or 512
    rewards = settings.get("rewards") or {}
    lines = [
        "---",
        f"base_model: {base}" if base != "?" else "base_model: null",
        "library_name: diffusers",
        "pipeline_tag: text-to-image",
        "tags: [r1vision, flow-grpo, lora]",
        "---",
        "",
        f"# {repo_id or Path(str(settings.get('output_dir') or 'model')).name}",
        "",
        f"A LoRA adapter for `{base}` trained with r1vision's text-to-image GRPO (Flow-GRPO) on "
        f"`{settings.get('dataset') or '?'}`, rewards "
        + ", ".join(f"`{k}` ({v:g})" for k, v in rewards.items())
        + f", recipe `{settings.get('recipe') or '(command line)'}`. `lora_ema/` holds the EMA weights (what the "
        "evaluations used), `lora/` the last raw weights.",
        "",
        "```python",
        "import torch",
        "from diffusers import StableDiffusion3Pipeline",
        "",
        f'pipe = StableDiffusion3Pipeline.from_pretrained("{base}", torch_dtype=torch.bfloat16).to("cuda")',
        f'pipe.load_lora_weights("{where}", subfolder="lora_ema")',
        f'image = pipe("a sign that says \\"OPEN\\"", num_inference_steps={settings.get("eval_num_inference_steps") or 40}, '
        f"guidance_scale={settings.get('guidance_scale') or 4.5}, height={side}, width={side},",
        f"             max_sequence_length={settings.get('max_sequence_length') or 128}).images[0]",
        "```",
        "",
        f"r1vision {installed('r1vision')}, diffusers {installed('diffusers')}, peft {installed('peft')}; "
        "`r1vision_run.json` holds every setting, `eval_metrics.csv` the evaluations.",
    ]
    if metrics:
        keep = [k for k in metrics if k in ("step", "reward", "reward_std") or k.startswith("rewards/")]
        lines += ["", "Final logged metrics (`metrics.csv`, last value of each):", ""]
        lines += [f"- `{k}`: {metrics[k]}" for k in keep]
    return "\n".join(lines) + "\n"


def finish_output(
    trainer: Any, output_dir: str | os.PathLike, kind: str, settings: dict[str, Any] | None = None
) -> None:
    """After the final save, for every r1vision trainer: the run record, what the kind adds (a VLM run: the
    base model's stock files and a merged model for a LoRA run), the model card, then the one upload of the
    complete folder."""

    args = trainer.args
    if not args.should_save:
        return
    settings = dict(settings or getattr(trainer, "r1vision_run", None) or trainer_settings(trainer, kind))
    write_run_info(output_dir, settings)
    repo_id = getattr(args, "hub_model_id", None)
    described = {**settings, "output_dir": str(output_dir)}
    if kind == "t2i-grpo":  # the LoRA folders are written by the trainer before this
        card = t2i_model_card(described, final_metrics(output_dir), repo_id)
    else:
        _finish_vlm_folder(output_dir, settings)
        card = model_card(described, final_metrics(output_dir), repo_id)
    (Path(output_dir) / "README.md").write_text(card)
    if getattr(args, "push_final_to_hub", False):
        push_folder(output_dir, args)


def _finish_vlm_folder(output_dir: str | os.PathLike, settings: dict[str, Any]) -> None:

    base = settings.get("base_model")
    if base:
        copy_stock_files(str(base), output_dir)
        if is_adapter_dir(output_dir):
            record_absolute_base(output_dir, str(base))
    if is_adapter_dir(output_dir):
        merged = merge_adapter(output_dir, os.path.join(output_dir, MERGED_SUBDIR))
        logger.info("LoRA adapter merged into a stand-alone model: %s", merged)


class FinalOutputMixin:
    """For the r1vision trainers: the final ``save_model`` writes the complete folder (see module docstring)."""

    _r1vision_kind = "train"

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        plugin = self.accelerator.state.fsdp_plugin if self.is_fsdp_enabled else None  # type: ignore[attr-defined]
        if plugin is not None and not _internal_call:
            # Checkpoints stay sharded (each rank its shard); the final folder is a whole model that
            # from_pretrained loads: Trainer writes no weights at all under SHARDED_STATE_DICT.
            plugin.set_state_dict_type("FULL_STATE_DICT")
        super().save_model(output_dir, _internal_call)  # type: ignore[misc]
        if _internal_call:  # a checkpoint: Trainer's own business
            return
        target = output_dir or self.args.output_dir  # type: ignore[attr-defined]
        if self.args.should_save:  # type: ignore[attr-defined]
            self.processing_class.save_pretrained(target)  # type: ignore[attr-defined]
            write_hub_layout(target)  # a full model's expert tensors as vLLM and the Hub expect them
        finish_output(self, target, self._r1vision_kind)
