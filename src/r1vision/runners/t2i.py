"""The text-to-image runners: ``r1vision t2i-grpo`` (train), ``t2i-sample`` (images) and ``t2i-eval``
(Flow-GRPO's evaluation protocol: ODE sampling, 40 steps, CFG 4.5, fixed seeds, metrics and a contact sheet)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1vision.tasks.options import options_mapping


@dataclass
class T2IScriptArguments:
    """What to train on; the rest are ``DiffusionGRPOConfig`` fields."""

    model: str = field(default="", metadata={"help": "diffusers pipeline folder or Hub id (SD3/SD3.5)."})
    dataset: str = field(
        default="",
        metadata={
            "help": "Prompt files folder (train.txt/test.txt), .txt, or a dataset with a prompt column."
        },
    )
    model_name_or_path: str | None = field(default=None, metadata={"help": "TRL's name for --model."})
    dataset_name: str | None = field(default=None, metadata={"help": "TRL's name for --dataset."})
    dataset_split: str = field(default="train", metadata={"help": "Training split."})
    eval_split: str | None = field(default="test", metadata={"help": "Evaluation split ('' for none)."})
    max_train_rows: int | None = field(default=None, metadata={"help": "Use only the first N prompts."})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["ocr"], metadata={"help": "Reward names or module.fn paths."}
    )
    reward_options: str | None = field(
        default=None,
        metadata={
            "help": 'JSON {reward name: {option: value}}, e.g. {"clip_score": {"path": "/models/clip"}}.'
        },
    )

    def __post_init__(self) -> None:
        for alias, name in (("model_name_or_path", "model"), ("dataset_name", "dataset")):
            if getattr(self, alias) and not getattr(self, name):
                setattr(self, name, getattr(self, alias))
        if not self.model:
            raise ValueError("--model is required (a diffusers pipeline folder or Hub id)")
        if not self.dataset:
            raise ValueError("--dataset is required (a prompt-file folder, a .txt file or a dataset)")


def build_rewards(names: list[str], options_json: Any) -> list[Any]:
    """The reward callables ``names`` with their options (``reward_options``)."""
    from r1vision.diffusion.rewards import resolve_reward

    options = options_mapping(options_json, "--reward_options") if options_json else {}
    return [resolve_reward(name, options.get(name)) for name in names]


def dry_run(script: T2IScriptArguments, config: Any) -> str:
    """``t2i-grpo --dry-run``: the prompts, rewards and output folder checked as training would, and the
    per-GPU memory estimate of this config (:mod:`r1vision.diffusion.estimate`); loads no model weights."""
    from r1vision.diffusion.data import check_prompts, load_prompts
    from r1vision.diffusion.estimate import BUILTIN, T2ISetup, format_report, t2i_memory_report
    from r1vision.trainer.checkpoint import check_output_dir

    train = load_prompts(script.dataset, script.dataset_split, limit=script.max_train_rows)
    check_prompts(train, script.reward_funcs)
    check_output_dir(config, config.resume_from_checkpoint)
    build_rewards(script.reward_funcs, script.reward_options)
    images = config.per_device_train_batch_size * config.num_generations
    lines = [
        f"dataset {script.dataset}: {len(train)} training prompts; rewards {', '.join(script.reward_funcs)}",
        f"per step and GPU: {config.per_device_train_batch_size} prompts x {config.num_generations} images = "
        f"{images} images, {config.num_inference_steps} steps at {config.resolution} px; "
        f"x{config.gradient_accumulation_steps} accumulation",
    ]
    shape = script.model if (Path(script.model) / "model_index.json").is_file() else None
    if shape is None and script.model.lower() in BUILTIN:
        shape = script.model
    if shape is None:
        lines.append(f"memory: {script.model} is neither a local folder nor a built-in shape; estimate with "
                     "`r1vision estimate-memory --model sd3.5-medium ...` for SD3.5-M")  # fmt: skip
    else:
        setup = T2ISetup(
            resolution=config.resolution, batch=images, rollout_images=images, steps=config.num_inference_steps,
            rollout_batch=config.rollout_batch_size,
            guidance=config.guidance_scale > 1.0, lora_r=config.lora_r, lora_targets=tuple(config.lora_target_modules),
            denoiser_dtype=config.denoiser_dtype, bf16=bool(config.bf16),
            gradient_checkpointing=bool(config.denoiser_checkpointing), ema=bool(config.ema),
        )  # fmt: skip
        lines.append(format_report(t2i_memory_report(shape, setup)))
    return "\n".join(lines)


def run_t2i_grpo(script: T2IScriptArguments, config: Any) -> str:
    """Train; returns the output directory."""
    from r1vision.diffusion.data import check_prompts, load_prompts
    from r1vision.diffusion.trainer import DiffusionGRPOTrainer
    from r1vision.trainer.checkpoint import check_output_dir

    train = load_prompts(script.dataset, script.dataset_split, limit=script.max_train_rows)
    check_prompts(train, script.reward_funcs)  # before any model loads
    evald = None
    if script.eval_split:
        try:
            evald = load_prompts(script.dataset, script.eval_split)
            check_prompts(evald, script.reward_funcs)
        except FileNotFoundError:
            evald = None
    check_output_dir(config, config.resume_from_checkpoint)
    rewards = build_rewards(script.reward_funcs, script.reward_options)
    trainer = DiffusionGRPOTrainer(
        script.model, rewards, args=config, train_dataset=train, eval_dataset=evald
    )
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    trainer.save_model(config.output_dir)
    if evald is not None:
        trainer.evaluate()
    return config.output_dir


def sample_images(model: str, prompts: list[str], out_dir: str | Path, *, lora: str | None = None, steps: int = 40,
                  guidance_scale: float = 4.5, resolution: int | None = None, seed: int = 0,
                  device: str | None = None) -> list[Any]:  # fmt: skip
    """Deterministic images (ODE, image ``i`` from ``seed + i``) from a pipeline and an optional LoRA folder,
    through stock diffusers' ``load_lora_weights`` (what a user of the exported LoRA does)."""
    import torch

    from r1vision.diffusion.families import load_family, to_pil
    from r1vision.diffusion.rollout import rollout

    family = load_family(model)
    if device:
        family.pipe.to(device)
    if lora:
        family.pipe.load_lora_weights(lora)
    side = resolution or _default_resolution(family)
    images = []
    for i, prompt in enumerate(prompts):
        cond = family.encode([prompt], guidance=guidance_scale > 1.0)
        roll = rollout(family, family.pipe.transformer, cond, steps=steps, resolution=side, guidance_scale=guidance_scale,
                       noise_level=0.0, kind="ode", generator=torch.Generator().manual_seed(seed + i))  # fmt: skip
        images += to_pil(roll.images)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(images):
        image.save(out / f"{i:04d}.png")
    return images


def _default_resolution(family: Any) -> int:
    size = int(family.transformer.config.sample_size)
    return size if family.decode_mode == "identity" else size * family.pipe.vae_scale_factor


def evaluate_t2i(model: str, prompts_source: str, out_dir: str | Path, *, split: str = "test", lora: str | None = None,
                 reward_funcs: list[str] | None = None, reward_options: Any = None, steps: int = 40,
                 guidance_scale: float = 4.5, resolution: int | None = None, seed: int = 0, limit: int | None = None,
                 device: str | None = None) -> dict[str, float]:  # fmt: skip
    """Flow-GRPO's evaluation: images for the split's prompts, scored; ``metrics.json``, ``records.jsonl``
    (prompt, text read, scores) and ``contact_sheet.png`` in ``out_dir``."""
    from r1vision.diffusion.data import check_prompts, load_prompts
    from r1vision.diffusion.evaluate import contact_sheet, score_images

    names = reward_funcs or ["ocr"]
    dataset = load_prompts(prompts_source, split, limit=limit)
    check_prompts(dataset, names)
    rows = [dataset[i] for i in range(len(dataset))]
    prompts = [str(r["prompt"]) for r in rows]
    images = sample_images(model, prompts, Path(out_dir) / "images", lora=lora, steps=steps,
                           guidance_scale=guidance_scale, resolution=resolution, seed=seed, device=device)  # fmt: skip
    funcs = build_rewards(names, reward_options)
    metrics, captions = score_images(funcs, [1.0] * len(funcs), prompts, images, rows)
    out = Path(out_dir)
    contact_sheet(images, captions, out / "contact_sheet.png")
    settings = {"model": model, "lora": lora, "prompts": str(prompts_source), "split": split, "steps": steps,
                "guidance_scale": guidance_scale, "seed": seed, "sampling": "ode"}  # fmt: skip
    (out / "metrics.json").write_text(json.dumps({**metrics, "settings": settings}, indent=2))
    with (out / "records.jsonl").open("w") as f:
        for i, (prompt, caption) in enumerate(zip(prompts, captions, strict=True)):
            f.write(json.dumps({"index": i, "prompt": prompt, "caption": caption}) + "\n")
    return metrics
