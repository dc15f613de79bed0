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
