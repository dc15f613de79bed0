"""The text-to-image runners: ``r1vision t2i-grpo`` (train), ``t2i-sample`` (images) and ``t2i-eval``
(Flow-GRPO's evaluation protocol: ODE sampling, 40 steps, CFG 4.5, fixed seeds, metrics and a contact sheet)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1vision import rewards
from r1vision.configs import recipe_path, required_fields, resolve_config_argv
from r1vision.tasks.loading import DatasetLoadError
from r1vision.tasks.options import options_mapping

logger = logging.getLogger(__name__)


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
        required = required_fields("t2i")
        if not self.model:
            raise ValueError(required["model"])
        if not self.dataset:
            raise ValueError(required["dataset"])


def build_rewards(names: list[str], options_json: Any) -> list[Any]:
    """The image rewards ``names`` with their options (``reward_options``), from the one registry
    (:mod:`r1vision.rewards`), each held to its declared range."""
    import r1vision.diffusion.rewards  # noqa: F401 - registers the image rewards

    options = options_mapping(options_json, "--reward_options") if options_json else {}
    return [s.func for s in rewards.guarded(rewards.resolve(names, "image", options=options))]


def parse_t2i_argv(argv: list[str]) -> tuple[T2IScriptArguments, Any]:
    """``(T2IScriptArguments, DiffusionGRPOConfig)`` from a ``t2i-grpo`` command line, as ``sft``/``grpo`` parse
    theirs (:func:`r1vision.runners.train.parse_train_argv`: a recipe gives defaults, flags override it, a
    flag in TRL's spelling overrides the recipe's other spelling). Raises ``ValueError`` for a refusal."""
    from trl import TrlParser

    from r1vision.diffusion.config import DiffusionGRPOConfig
    from r1vision.runners.train import _command_line_spelling_wins, _join_report_to

    argv = _command_line_spelling_wins(_join_report_to(resolve_config_argv(list(argv))))
    parser = TrlParser((T2IScriptArguments, DiffusionGRPOConfig), prog="r1vision t2i-grpo")
    script, config = parser.parse_args_and_config(argv)
    script.recipe = recipe_path(argv)
    return script, config


def dry_run(
    script: T2IScriptArguments, config: Any, card_gb: float | None = None, processes: int = 1
) -> tuple[str, list[str]]:
    """``t2i-grpo --dry-run``: the prompts, rewards and output folder checked as training would, and the
    per-GPU memory estimate of this config (:mod:`r1vision.diffusion.estimate`); loads no model weights.
    Returns the report and the problems that refuse the run (a plan that fits no listed card, or not the
    ``card_gb`` one)."""
    from r1vision.diffusion.data import check_prompts, load_prompts
    from r1vision.diffusion.estimate import BUILTIN, T2ISetup, format_report, t2i_memory_report
    from r1vision.trainer.checkpoint import check_output_dir

    train = load_prompts(script.dataset, script.dataset_split, limit=script.max_train_rows)
    check_prompts(train, script.reward_funcs)
    check_output_dir(config, config.resume_from_checkpoint)
    build_rewards(script.reward_funcs, script.reward_options)
    spg = config.steps_per_generation or config.gradient_accumulation_steps
    local = config.per_device_train_batch_size * spg
    from r1vision.diffusion.hooks import check_prompt_count

    check_prompt_count(config, processes, train)
    groups = config.per_device_train_batch_size * processes * spg // config.num_generations
    lines = [
        f"dataset {script.dataset}: {len(train)} training prompts; rewards {', '.join(script.reward_funcs)}",
        f"{processes} process(es): a generation of {groups} prompts x {config.num_generations} images feeds "
        f"{spg // config.gradient_accumulation_steps} optimizer step(s)",
        f"per GPU: {config.per_device_train_batch_size} images per micro-step, {local} sampled per generation "
        f"(steps_per_generation {spg}), {config.num_inference_steps} steps at {config.resolution} px; groups of "
        f"{config.num_generations}; x{config.gradient_accumulation_steps} accumulation",
    ]
    problems: list[str] = []
    shape = script.model if (Path(script.model) / "model_index.json").is_file() else None
    if shape is None and script.model.lower() in BUILTIN:
        shape = script.model
    if shape is None:
        lines.append(
            f"memory: {script.model} is neither a local folder nor a built-in shape; estimate with "
            "`r1vision estimate-memory --model sd3.5-medium ...` for SD3.5-M"
        )
    else:
        setup = T2ISetup(
            resolution=config.resolution,
            batch=config.per_device_train_batch_size,
            rollout_images=local,
            steps=config.num_inference_steps,
            rollout_batch=config.rollout_batch_size or config.per_device_train_batch_size,
            guidance=config.guidance_scale > 1.0,
            lora_r=config.lora_r,
            lora_targets=tuple(config.lora_target_modules),
            denoiser_dtype=config.denoiser_dtype,
            bf16=bool(config.bf16),
            gradient_checkpointing=bool(config.denoiser_checkpointing),
            ema=bool(config.ema),
        )
        report = t2i_memory_report(shape, setup)
        lines.append(format_report(report))
        peak = report["peak"] / 2**30
        if card_gb is not None and peak > card_gb * 1e9 / 2**30:
            problems.append(f"the estimated peak {peak:.1f} GiB does not fit a {card_gb:g} GB card")
        elif card_gb is None and not any(report["fits"].values()):
            problems.append(
                f"the estimated peak {peak:.1f} GiB fits none of {', '.join(report['fits'])}: lower "
                "per_device_train_batch_size or rollout_batch_size, or turn gradient_checkpointing on"
            )
    return "\n".join(lines), problems


def load_eval_prompts(script: T2IScriptArguments, config: Any) -> Any:
    """The evaluation split, or ``None`` when ``eval_split`` is empty or the folder has none (a prompt folder
    with ``train.txt`` alone, as ``synth --task t2i_ocr`` writes it, trains with evaluation off, and says
    so). An evaluation asked for by ``eval_strategy`` or ``eval_on_start`` without the split is refused."""
    from r1vision.diffusion.data import check_prompts, load_prompts

    if not script.eval_split:
        return None
    try:
        evald = load_prompts(script.dataset, script.eval_split)
    except (FileNotFoundError, DatasetLoadError) as exc:
        wanted = (
            str(getattr(config, "eval_strategy", "no")).split(".")[-1].lower() != "no" or config.eval_on_start
        )
        if wanted:
            raise DatasetLoadError(
                f"--dataset {script.dataset}: no {script.eval_split!r} split for the evaluation that eval_strategy/"
                f"eval_on_start ask for ({str(exc).splitlines()[0]}); add {script.eval_split}.txt, or pass "
                "--eval_strategy no --eval_on_start false"
            ) from None
        logger.warning("no %r split in %s: training without evaluation", script.eval_split, script.dataset)
        return None
    check_prompts(evald, script.reward_funcs)
    return evald


def run_t2i_grpo(script: T2IScriptArguments, config: Any) -> str:
    """Train; returns the output directory. The final evaluation runs once (not again when the last step
    was just evaluated)."""
    from r1vision.diffusion.data import check_prompts, load_prompts
    from r1vision.diffusion.hooks import check_prompt_count
    from r1vision.diffusion.trainer import DiffusionGRPOTrainer
    from r1vision.trainer.distributed import record_layout
    from r1vision.trainer.preemption import finish_if_preempted, signals_held

    config.check_generation_layout(config.world_size)  # before any model loads (also in the launched workers)
    rewards = build_rewards(script.reward_funcs, script.reward_options)  # an unknown name, before the data
    train = load_prompts(script.dataset, script.dataset_split, limit=script.max_train_rows)
    check_prompts(train, script.reward_funcs)
    check_prompt_count(config, config.world_size, train)
    evald = load_eval_prompts(script, config)
    trainer = DiffusionGRPOTrainer(
        script.model, rewards, args=config, train_dataset=train, eval_dataset=evald
    )
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    finish_if_preempted(trainer)  # a signal stopped it: its checkpoint is the result
    with signals_held():  # from here a signal waits for the final folder (the run is complete: exit 0)
        if evald is not None and trainer.state.global_step not in trainer.evaluated_steps:
            trainer.evaluate()
        record_layout(trainer, config.output_dir)
        trainer.r1vision_run = {
            "recipe": getattr(script, "recipe", None),
            "dataset": script.dataset,
            "dataset_split": script.dataset_split,
            "reward_funcs": list(script.reward_funcs),
            "reward_options": script.reward_options,
        }
        trainer.save_model(config.output_dir)
    return config.output_dir


def sample_images(
    model: str,
    prompts: list[str],
    out_dir: str | Path,
    *,
    lora: str | None = None,
    steps: int = 40,
    guidance_scale: float = 4.5,
    resolution: int | None = None,
    seed: int = 0,
    device: str | None = None,
    batch_size: int = 8,
    first_index: int = 0,
    max_sequence_length: int | None = None,
    progress: Any = None,
) -> list[Any]:
    """Deterministic images (:func:`r1vision.diffusion.rollout.sample_ode`: image ``i`` from the seed
    ``seed + first_index + i``) from a pipeline and an optional LoRA folder, loaded through stock diffusers'
    ``load_lora_weights`` (what a user of the exported LoRA does); saved as ``out_dir/NNNN.png``."""
    from r1vision.diffusion.families import load_family, to_pil
    from r1vision.diffusion.rollout import sample_ode

    family = load_family(model, max_sequence_length=max_sequence_length)
    if device:
        family.pipe.to(device)
    if lora:
        family.pipe.load_lora_weights(lora)
    side = resolution or default_resolution(family)
    images = to_pil(
        sample_ode(
            family,
            family.pipe.transformer,
            prompts,
            steps=steps,
            resolution=side,
            guidance_scale=guidance_scale,
            seed=seed,
            first_index=first_index,
            batch_size=batch_size,
            progress=progress,
        )
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(images):
        image.save(out / f"{first_index + i:04d}.png")
    return images


def default_resolution(family: Any) -> int:
    """The evaluation side when neither the command line nor a run record says: Flow-GRPO's 512 px, or the
    model's own size when smaller (tiny test models)."""
    size = int(family.transformer.config.sample_size)
    native = size if family.decode_mode == "identity" else size * family.pipe.vae_scale_factor
    return min(512, native)


@dataclass
class Sampling:
    """How images are drawn: the values given, else a run record's (a LoRA from ``t2i-grpo`` sits in its
    output folder beside ``r1vision_run.json``), else Flow-GRPO's evaluation protocol (40 ODE steps, CFG 4.5)."""

    steps: int = 40
    guidance_scale: float = 4.5
    resolution: int | None = None
    max_sequence_length: int | None = None
    source: str = "defaults"

    @staticmethod
    def resolve(
        lora: str | None,
        steps: int | None,
        guidance_scale: float | None,
        resolution: int | None,
        max_sequence_length: int | None,
    ) -> Sampling:
        record: dict[str, Any] = {}
        source = "defaults"
        if lora:
            from r1vision.trainer.run_info import RUN_FILE, read_run_info

            for folder in (Path(lora), Path(lora).parent):
                if (folder / RUN_FILE).is_file():
                    record, source = read_run_info(folder) or {}, str(folder / RUN_FILE)
                    break
        pick = lambda given, key, default: given if given is not None else record.get(key, default)  # noqa: E731
        return Sampling(
            int(pick(steps, "eval_num_inference_steps", 40)),
            float(pick(guidance_scale, "guidance_scale", 4.5)),
            pick(resolution, "resolution", None),
            pick(max_sequence_length, "max_sequence_length", None),
            source,
        )


def _shard(n: int) -> tuple[int, int, range]:
    """(rank, world size, this process's contiguous share of ``n`` items), for ``torchrun``-launched runs."""
    import os

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    share = -(-n // world)
    return rank, world, range(rank * share, min((rank + 1) * share, n))


def _gather(items: list[Any]) -> list[Any]:
    """Every process's ``items`` on every process (a gloo/NCCL group started here when launched)."""
    import torch.distributed as dist

    if not dist.is_available() or int(__import__("os").environ.get("WORLD_SIZE", "1") or 1) == 1:
        return items
    if not dist.is_initialized():
        import torch

        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    box: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(box, items)
    return [item for part in box for item in part]


def _progress(total: int, rank: int, what: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=what, unit="img", disable=rank != 0)


def _sample_share(
    what: str,
    dataset: Any,
    model: str,
    out_dir: str | Path,
    lora: str | None,
    steps: int | None,
    guidance_scale: float | None,
    resolution: int | None,
    seed: int,
    device: str | None,
    batch_size: int,
    max_sequence_length: int | None,
) -> tuple[Sampling, int, int, range, list[Any]]:
    """This process's share of ``dataset``'s prompts sampled into ``out_dir/images`` (``t2i-eval`` and
    ``t2i-sample``): the resolved settings, rank, world size, the share's indices and its images."""
    how = Sampling.resolve(lora, steps, guidance_scale, resolution, max_sequence_length)
    rank, world, mine = _shard(len(dataset))
    bar = _progress(len(dataset), rank, what)
    images = sample_images(
        model,
        [str(dataset[i]["prompt"]) for i in mine],
        Path(out_dir) / "images",
        lora=lora,
        steps=how.steps,
        guidance_scale=how.guidance_scale,
        resolution=how.resolution,
        seed=seed,
        device=device or _default_device(),
        batch_size=batch_size,
        first_index=mine.start,
        max_sequence_length=how.max_sequence_length,
        progress=lambda n: bar.update(n * world),
    )
    bar.close()
    return how, rank, world, mine, images


def evaluate_t2i(
    model: str,
    prompts_source: str,
    out_dir: str | Path,
    *,
    split: str = "test",
    lora: str | None = None,
    reward_funcs: list[str] | None = None,
    reward_options: Any = None,
    steps: int | None = None,
    guidance_scale: float | None = None,
    resolution: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    device: str | None = None,
    batch_size: int = 8,
    max_sequence_length: int | None = None,
) -> dict[str, float]:
    """Flow-GRPO's evaluation: images for the split's prompts (ODE, fixed seed per prompt), scored. Under
    ``torchrun`` each process takes a contiguous share of the prompts and the records are gathered. Writes
    ``metrics.json`` (with the settings used and where they came from), ``records.jsonl`` (prompt, target,
    text read, every score), ``images/`` and paged contact sheets in ``out_dir``."""
    from r1vision.diffusion.data import check_prompts, load_prompts
    from r1vision.diffusion.evaluate import score_records, write_evaluation

    names = reward_funcs or ["ocr"]
    dataset = load_prompts(prompts_source, split, limit=limit)
    check_prompts(dataset, names)
    how, rank, world, mine, images = _sample_share(
        "t2i-eval", dataset, model, out_dir, lora, steps, guidance_scale, resolution, seed, device, batch_size,
        max_sequence_length,
    )  # fmt: skip
    rows = [dataset[i] for i in mine]
    prompts = [str(r["prompt"]) for r in rows]
    out = Path(out_dir)
    funcs = build_rewards(names, reward_options)
    records = _gather(score_records(funcs, [1.0] * len(funcs), prompts, images, rows, indices=list(mine)))
    if rank != 0:
        return {}
    from PIL import Image

    images_all = [
        Image.open(out / "images" / f"{r['index']:04d}.png")
        for r in sorted(records, key=lambda r: r["index"])
    ]
    metrics = write_evaluation(
        records, images_all, out, [getattr(f, "__name__", type(f).__name__) for f in funcs]
    )
    settings = {
        "model": model,
        "lora": lora,
        "prompts": str(prompts_source),
        "split": split,
        "steps": how.steps,
        "guidance_scale": how.guidance_scale,
        "resolution": how.resolution,
        "max_sequence_length": how.max_sequence_length,
        "settings_from": how.source,
        "seed": seed,
        "sampling": "ode",
        "processes": world,
    }
    (out / "metrics.json").write_text(json.dumps({**metrics, "settings": settings}, indent=2))
    return metrics


def sample_t2i(
    model: str,
    prompts_source: str,
    out_dir: str | Path,
    *,
    split: str = "test",
    lora: str | None = None,
    steps: int | None = None,
    guidance_scale: float | None = None,
    resolution: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    device: str | None = None,
    batch_size: int = 8,
    max_sequence_length: int | None = None,
) -> Path:
    """``t2i-sample``: images for the prompts (sharded under ``torchrun``) and paged contact sheets."""
    from r1vision.diffusion.data import load_prompts
    from r1vision.diffusion.evaluate import contact_sheets

    dataset = load_prompts(prompts_source, split, limit=limit)
    _, rank, _, _, _ = _sample_share(
        "t2i-sample", dataset, model, out_dir, lora, steps, guidance_scale, resolution, seed, device, batch_size,
        max_sequence_length,
    )  # fmt: skip
    out = Path(out_dir)
    _gather([])  # every process has written its images
    if rank == 0:
        from PIL import Image

        images = [Image.open(out / "images" / f"{i:04d}.png") for i in range(len(dataset))]
        records = [
            {"index": i, "prompt": str(dataset[i]["prompt"]), "rewards": {}} for i in range(len(dataset))
        ]
        contact_sheets(images, records, out)
    return out


def _default_device() -> str:
    """A GPU when there is one (this process's, under ``torchrun``), else the CPU."""
    import os

    import torch

    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0') or 0)}"
    return "cpu"
