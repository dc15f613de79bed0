"""``r1vision grpo|sft --config R --dry-run``: everything a run would use, resolved on a CPU, no weights.

Resolves the model family and pixel budget (recipe, else the model's processor, else the family's
shipped processor default), image tokens per image, the vLLM engine arguments (``max_model_len``, memory
share, tensor parallel, sleep level, ``mm_processor_kwargs``), which parameters each weight sync sends
(the model is built on the ``meta`` device with the run's freezing and LoRA) and the per-GPU memory from
:mod:`r1vision.estimate`. Then it refuses, with exit code 2, the combinations that cannot work.

Dry-run-only flags (anywhere on the command line): ``--gpus N`` (training GPUs, default 8),
``--card-gb G`` (GPU memory, default 80), ``--fsdp2`` (FSDP2 full shard), ``--zero {0,2,3}`` (default: the run's DeepSpeed config, 0 = DDP
otherwise). The model config comes from a local folder or ``config.json``, a built-in shape
(``r1vision/data/model_shapes``, matched by Hub id) or, last, the Hub.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r1vision.configs import CommandLine, resolve_config_argv
from r1vision.estimate import TrainSetup, estimate, load_model_config, shape_of
from r1vision.generation import vllm_plan
from r1vision.vision.budget import PixelBudget, processor_pixels, resolve_budget
from r1vision.vision.family import model_family

# The image budgets the Hub processors ship with (preprocessor_config.json), used when the model is a Hub
# id whose files are not at hand: Qwen2/2.5-VL min_pixels/max_pixels, Qwen3-VL size.shortest/longest_edge.
SHIPPED_PROCESSOR_BUDGET = {
    "qwen2_vl": {"min_pixels": 3136, "max_pixels": 12845056},
    "qwen2_5_vl": {"min_pixels": 3136, "max_pixels": 12845056},
    "qwen3_vl": {"size": {"shortest_edge": 65536, "longest_edge": 16777216}},
    # Qwen3-VL-MoE and Qwen3.5 (dense, MoE) ship Qwen3-VL's image settings
    "qwen3_vl_moe": {"size": {"shortest_edge": 65536, "longest_edge": 16777216}},
    "qwen3_5": {"size": {"shortest_edge": 65536, "longest_edge": 16777216}},
    "qwen3_5_moe": {"size": {"shortest_edge": 65536, "longest_edge": 16777216}},
}
GIB = 1024**3
SERVER_SHARE = 0.9  # r1vision vllm-serve's default --gpu-memory-utilization


@dataclass
class DryRun:
    """The resolved plan of one run, and what refuses it."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, text: str) -> None:
        self.lines.append(f"{key:<22}{text}")


def _pop_flag(argv: list[str], flag: str, cast: type, default: Any) -> Any:
    """Remove a dry-run-only ``flag`` from ``argv`` and return its value, in any spelling (``--card_gb 40``,
    ``--card-gb 40``, ``--card-gb=40``)."""
    bare = flag[2:].replace("-", "_")
    names = {f"--{bare}", f"--{bare.replace('_', '-')}"}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in names:
            if not eq:
                value = argv[i + 1] if i + 1 < len(argv) else ""
            del argv[i : i + (1 if eq else 2)]
            try:
                return cast(value)
            except ValueError:
                raise ValueError(f"{name} {value!r}: expected {cast.__name__}") from None
    return default


def _recipe_value(argv: Sequence[str], key: str) -> Any:
    """A field's value from the command line (a bare boolean flag is ``"true"``, as TRL's parser reads
    it), else from the ``--config`` recipe (None when unset): :class:`r1vision.configs.CommandLine`."""

    return CommandLine.of(argv).value(key)


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def budget_source(model: str, family: str) -> tuple[Any, str]:
    """What the budget resolver should read for the processor's own budget, and a label for it."""

    if None not in processor_pixels(model):  # a local folder, or a Hub id in the cache
        return model, f"{model}'s preprocessor_config.json"
    return SHIPPED_PROCESSOR_BUDGET[family], f"{family} processor as shipped on the Hub"


def parse_run(kind: str, argv: list[str]) -> tuple[Any, Any]:
    """Parse the command line and recipe exactly as the run would (:func:`parse_train_argv`)."""
    from r1vision.runners.train import parse_train_argv

    if _recipe_value(argv, "dataset") is None and _recipe_value(argv, "dataset_name") is None:
        argv = [*argv, "--dataset", "(not given: the dry run does not read data)"]
    return parse_train_argv(kind, argv)


def _meta_model(model_config: Any, config: Any) -> Any:
    """The run's model on the meta device, frozen and wrapped in LoRA as the trainer would."""
    import torch
    from transformers import AutoModelForImageTextToText

    from r1vision.trainer.setup import freeze_vision_tower, lora_config

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(model_config)
        if config.freeze_vision_tower:
            freeze_vision_tower(model)
        if config.lora_r > 0:
            from peft import get_peft_model

            from r1vision.trainer.config import lora_extras

            lora = lora_config(
                config.lora_r,
                config.lora_alpha,
                config.lora_dropout,
                config.lora_target_modules,
                **lora_extras(config),
            )
            model = get_peft_model(model, lora)
    return model


def _zero_stage(config: Any, override: int | None) -> int:
    if override is not None:
        return override
    path = getattr(config, "deepspeed", None)
    if isinstance(path, dict):
        return int(path.get("zero_optimization", {}).get("stage", 0))
    if path:
        return int(json.loads(Path(path).read_text()).get("zero_optimization", {}).get("stage", 0))
    return 0


def plan(kind: str, argv: Sequence[str]) -> DryRun:
    """Resolve the run ``r1vision KIND ARGV`` would start; collect what refuses it."""

    argv = resolve_config_argv([a for a in argv if a != "--dry-run"])  # --config takes a recipe name too
    gpus = _pop_flag(argv, "--gpus", int, 8)
    card_gb = _pop_flag(argv, "--card-gb", float, 80.0)
    zero_override = _pop_flag(argv, "--zero", int, None)
    fsdp = "--fsdp2" in argv  # FSDP2 full shard (--accelerate_config fsdp2) instead of DeepSpeed
    argv = [a for a in argv if a != "--fsdp2"]
    out = DryRun()
    target_cpu = _truthy(_recipe_value(argv, "use_cpu"))
    # Judge the engine settings for the machine the run targets (a GPU unless use_cpu), not this one.
    # The target GPU's mixed precision is read from the command line below (bf16): parsed here, an explicit
    # --bf16 true / --fp16 true would be refused by transformers on a machine without a GPU.
    parse_argv = list(argv) if target_cpu else [*argv, "--bf16", "false", "--fp16", "false"]
    with vllm_plan.assume_cuda(not target_cpu):
        try:
            script, config = parse_run(kind, parse_argv)
        except (ValueError, SystemExit) as exc:
            out.problems.append(f"the configuration itself is refused: {exc}")
            return out
    model_config = load_model_config(script.model)
    family = model_family(model_config)
    out.add("run", f"r1vision {kind}, task {script.task}, dataset {script.dataset}")
    out.add("model", f"{script.model} (family {family}, max context {_context(model_config)} tokens)")

    processor, source = budget_source(script.model, family)
    if config.min_pixels is not None or config.max_pixels is not None:
        source = "the recipe / command line" + (
            f" (rest from {source})" if None in (config.min_pixels, config.max_pixels) else ""
        )
    budget = resolve_budget(family, config.min_pixels, config.max_pixels, processor)  # the run's own rule
    per_image = vllm_plan.max_image_tokens(budget)
    max_images = int(getattr(config, "max_images_per_prompt", 1))
    out.add(
        "pixel budget",
        f"min {budget.min_pixels}, max {budget.max_pixels} pixels, factor {budget.factor} ({source})",
    )
    out.add("image tokens", f"up to {per_image} per image, {max_images} image(s) per prompt")
    out.facts.update(family=family, budget=budget, image_tokens=per_image)
    vision_pixels = budget.max_pixels  # what one prompt's vision input may cost, in image pixels
    video, video_only = _video_budget(script, config, family)
    if video is not None:
        steps = -(-video.max_frames // video.temporal_patch_size)
        per_frame = video.max_frame_pixels // (video.factor * video.factor)
        per_video = steps * per_frame
        out.add(
            "video tokens",
            f"up to {per_video} per video: {video.max_frames} frames at {video.fps:g} fps -> {steps} time steps "
            f"x {per_frame} tokens (max {video.max_frame_pixels} pixels per frame)",
        )
        video_pixels = per_video * video.factor * video.factor
        # a video task's prompts hold videos only: the image budget does not apply to them
        vision_pixels = video_pixels if video_only else max(vision_pixels, video_pixels)
    if config.max_pixels is None and not video_only:
        out.lines.append(
            f"{'':<22}note: no max_pixels in the recipe, so one image may take {per_image} tokens; "
            "set max_pixels to bound sequence length and memory"
        )

    model = _meta_model(model_config, config)
    shape = shape_of(model_config)
    if shape.active_params:  # an MoE: memory follows the total, compute the active share
        out.add(
            "experts",
            f"{shape.experts_per_token} of {shape.experts} per token: {shape.active_params / 1e9:.1f}B of "
            f"{shape.total_params / 1e9:.1f}B parameters active; all stored, trained and sharded",
        )
    text_tokens = int(getattr(config, "max_prompt_text_tokens", vllm_plan.DEFAULT_PROMPT_TEXT_TOKENS))
    if kind == "grpo":
        completion = int(config.max_completion_length)
    else:  # SFT: max_length bounds the whole sequence (prompt, images and target)
        completion, text_tokens = int(getattr(config, "max_length", None) or 2048), 0
    if kind == "grpo":
        max_videos = int(getattr(config, "max_videos_per_prompt", 1)) if video_only else 0
        _engine(out, config, budget, max_images, completion, text_tokens, model, shape, card_gb, target_cpu,
                (video, max_videos))  # fmt: skip
    zero = 0 if fsdp else _zero_stage(config, zero_override)
    # bf16 mixed precision as on the target GPU (TRL's default there; this machine's config may have
    # turned it off for lack of one): only an explicit --bf16 false / fp16 turns it off
    explicit = _recipe_value(argv, "bf16")
    bf16 = (
        not target_cpu
        and not _truthy(_recipe_value(argv, "fp16"))
        and (explicit is None or _truthy(explicit))
    )
    setup = TrainSetup(
        gpus=gpus,
        zero=zero,  # 0: no DeepSpeed (DDP): every GPU holds every state, in the load dtype
        fsdp=fsdp,
        offload=_offloads(config),
        lora_r=config.lora_r,
        freeze_vision=config.freeze_vision_tower,
        batch=config.per_device_train_batch_size,
        prompt_tokens=text_tokens,
        completion_tokens=completion,
        max_pixels=vision_pixels,
        images=max_images,
        gradient_checkpointing=bool(config.gradient_checkpointing),
        vllm_gpu_memory_utilization=float(getattr(config, "vllm_gpu_memory_utilization", 0.3)),
        beta=float(getattr(config, "beta", 0.0) or 0.0) if kind == "grpo" else 0.0,
        fused_logits=kind == "grpo",
        weight_bytes=_weight_bytes(config, bf16),
        bf16_autocast=bf16,
        generation=str(getattr(config, "generation_backend", "hf")) if kind == "grpo" else "hf",
        num_generations=int(getattr(config, "num_generations", 1) or 1) if kind == "grpo" else 1,
        lora_adapters=bool(getattr(config, "vllm_lora_adapters", False)) if kind == "grpo" else False,
    )
    est = estimate(shape, setup)
    if fsdp:
        layout = f"FSDP2 over {gpus} GPUs"
    else:
        layout = f"ZeRO-{zero} over {gpus} GPUs" if zero else "DDP (every GPU holds every state)"
    out.add(
        "memory per GPU",
        f"{est.training / GIB:.1f} GiB training ({layout}{', offload' if setup.offload else ''}): "
        f"model states {est.model_states / GIB:.1f}, activations {est.activations / GIB:.1f}, "
        f"logits {est.logits / GIB:.1f}, reference {est.reference / GIB:.1f} GiB; weights loaded "
        f"{'bf16' if setup.weight_bytes == 2 else 'fp32'}",
    )
    out.add(
        "memory peaks",
        f"{est.peak / GIB:.1f} GiB per GPU at the worst moment: weight sync +{est.sync_peak / GIB:.1f} GiB, "
        f"generation +{est.generation_peak / GIB:.1f} GiB over the model states",
    )
    out.facts.update(training_bytes=est.training, peak_bytes=est.peak, zero=zero, fsdp=fsdp)
    colocated = kind == "grpo" and config.use_vllm and config.vllm_mode == "colocate"
    share = float(config.vllm_gpu_memory_utilization) * card_gb * GIB if colocated else 0.0
    if not target_cpu and est.peak + share > card_gb * GIB:
        out.problems.append(
            f"training needs ~{est.peak / GIB:.1f} GiB per GPU at its peak"
            + (f" plus vLLM's {share / GIB:.1f} GiB share" if share else "")
            + f", more than a {card_gb:g} GB card: lower per_device_train_batch_size, use LoRA, ZeRO-3 "
            "(--zero 3 / a DeepSpeed config), offload, or more GPUs (see r1vision estimate-memory)"
            + (
                f"; no max_pixels is set, so every image is costed at {per_image} tokens"
                if config.max_pixels is None
                else ""
            )
        )
    return out


def _video_budget(script: Any, config: Any, family: str) -> tuple[Any, bool]:
    """The run's video budget when it trains on videos (a video task, or any ``--video_*`` option set), and
    whether its task's rows hold videos only; ``(None, False)`` otherwise."""
    from r1vision.tasks import task_class
    from r1vision.trainer.run_info import VIDEO_KEYS
    from r1vision.vision.video_processor import video_budget_from_args

    video_task = bool(getattr(task_class(script.task), "videos", False))
    if not video_task and not any(getattr(config, k, None) is not None for k in VIDEO_KEYS):
        return None, False
    return video_budget_from_args(family, config), video_task


def _weight_bytes(config: Any, bf16: bool) -> int:
    """Bytes per weight as the run loads them: as asked, else bf16 under bf16 mixed precision on a GPU
    (``bf16``: r1vision's default there, trainer/config.py) and TRL's fp32 otherwise (a CPU target,
    ``--bf16 false``)."""
    dtype = str(
        (getattr(config, "model_init_kwargs", None) or {}).get("dtype") or getattr(config, "dtype", "") or ""
    )
    if dtype in ("bfloat16", "torch.bfloat16", "float16", "torch.float16"):
        return 2
    if dtype in ("float32", "torch.float32") or not bf16:
        return 4
    return 2


def _context(model_config: Any) -> int:
    text = model_config.get_text_config()
    return int(getattr(text, "max_position_embeddings", 0) or 0)


def _offloads(config: Any) -> bool:
    path = getattr(config, "deepspeed", None)
    if not path:
        return False
    data = path if isinstance(path, dict) else json.loads(Path(path).read_text())
    zero = data.get("zero_optimization", {})
    return "offload_optimizer" in zero or "offload_param" in zero


def _engine(
    out: DryRun,
    config: Any,
    budget: PixelBudget,
    max_images: int,
    completion: int,
    text_tokens: int,
    model: Any,
    shape: Any,
    card_gb: float,
    target_cpu: bool,
    videos: tuple[Any, int] = (None, 0),
) -> None:
    """The vLLM engine's arguments and weight sync, and what refuses them. ``videos``: the video budget
    and the videos a prompt holds (0: an image task)."""
    from r1vision.generation.vllm_engine import budget_processor_kwargs
    from r1vision.generation.vllm_trl import sync_summary

    if not config.use_vllm:
        out.add("generation", "hf (transformers generate inside the training processes)")
        return
    per_rank = bool(getattr(config, "vllm_server_per_rank", False))
    mode = config.vllm_mode + (" (r1vision per-rank servers)" if per_rank else "")
    out.add("generation", f"vLLM {mode}")
    video_budget, max_videos = videos
    per_video = vllm_plan.max_video_tokens(video_budget) if max_videos and video_budget is not None else 0
    if max_videos and config.vllm_mode == "server" and not per_rank:
        out.problems.append(
            "video rows cannot go through TRL's vLLM server (its client sends images only): use "
            "generation_backend vllm_colocate, or vllm_server with vllm_server_per_rank"
        )
    need = vllm_plan.required_model_len(budget, max_images, completion, text_tokens) + max_videos * per_video
    max_len = vllm_plan.resolve_max_model_len(
        config.vllm_max_model_length,
        budget,
        max_images,
        completion,
        text_tokens,
        video_tokens=max_videos * per_video,
    )
    how = (
        "vllm_max_model_length"
        if config.vllm_max_model_length
        else "prompt text + images + videos + completion"
    )
    out.add(
        "max_model_len",
        f"{max_len} ({how}: {text_tokens} + {max_images} x {vllm_plan.max_image_tokens(budget)} + "
        f"{max_videos} x {per_video} + {completion})",
    )
    context = vllm_plan.model_context(model.config) or need
    if need > context and not config.vllm_max_model_length:
        out.problems.append(
            f"a rollout can be {need} tokens ({text_tokens} prompt text + {max_images} image(s) at the budget + "
            f"{completion} completion), more than the model's context of {context}: lower max_pixels, "
            "max_prompt_text_tokens or max_completion_length"
        )
        max_len = context
    if max_len < need and config.vllm_max_model_length:
        out.problems.append(
            f"vllm_max_model_length={max_len} is shorter than a rollout can be ({need} tokens: "
            f"{text_tokens} prompt text + {max_images} image(s) at the budget + {completion} completion)"
        )
    sleep = vllm_plan.sleep_plan(bool(config.vllm_enable_sleep_mode) and config.vllm_mode == "colocate")
    tp = int(config.vllm_tensor_parallel_size)
    util = float(config.vllm_gpu_memory_utilization)
    out.add(
        "engine args",
        (
            f"max_model_len={max_len}, gpu_memory_utilization={util if config.vllm_mode == 'colocate' else '(server flag)'}, "
            f"tensor_parallel_size={tp}, limit_mm_per_prompt={{'image': {max_images}, 'video': {max_videos}}}, "
            f"mm_processor_kwargs={budget_processor_kwargs(budget)}"
        ),
    )
    out.add("sleep mode", sleep.describe())
    partial, full = sync_summary(model), sync_summary(model, full=True)
    sends = full if sleep.sync_after_sleep == "all" and sleep.level else partial
    if getattr(config, "vllm_lora_adapters", False):
        adapter = [p for n, p in model.named_parameters() if ".lora_" in n]
        elements = sum(p.numel() for p in adapter)
        sends = {"tensors": len(adapter), "elements": elements}
        out.add(
            "weight sync",
            f"the LoRA adapter: {len(adapter)} tensors, {elements / 1e6:.1f}M elements ({4 * elements / 2**20:.0f} "
            f"MiB fp32) per sync to vLLM's LoRA support (vllm_lora_adapters; merged weights would be "
            f"{partial['elements'] / 1e9:.2f}B elements)",
        )
    else:
        out.add(
            "weight sync",
            f"{sends['tensors']} of {sends['total_tensors']} tensors, {sends['elements'] / 1e9:.2f}B of "
            f"{sends['total_elements'] / 1e9:.2f}B elements per sync"
            + (
                " (every parameter: the engine slept)"
                if sends is full
                else " (the parameters that can change)"
            ),
        )
        if sends is not full:
            out.lines.append(
                f"{'':<22}not sent: {_skipped(model)} (the engine keeps its checkpoint's values)"
            )
    out.facts.update(max_model_len=max_len, sleep_level=sleep.level, sync_tensors=sends["tensors"])
    # vLLM starts when its share holds the weights and the KV cache of one max_model_len sequence; TRL's
    # max_num_seqs (one generation round: per_device_train_batch_size x steps_per_generation) runs
    # concurrently only as far as the KV cache reaches.
    seqs = config.per_device_train_batch_size * int(getattr(config, "steps_per_generation", None) or 1)
    kv_one = 2 * shape.layers * shape.kv_dim * 2 * max_len
    weights = 2 * shape.total_params
    engine = (weights + kv_one) // max(1, tp)
    full_round = (weights + kv_one * seqs) // max(1, tp)
    out.add(
        "vLLM memory",
        f"{engine / GIB:.1f} GiB per engine to start (bf16 weights + KV cache of one max_model_len sequence); "
        f"{full_round / GIB:.1f} GiB to hold all {seqs} sequences of a generation round at once",
    )
    if config.vllm_mode == "server" and not target_cpu and engine > SERVER_SHARE * card_gb * GIB:
        out.problems.append(
            f"a vLLM server needs ~{engine / GIB:.1f} GiB (weights + KV cache at max_model_len {max_len}), "
            f"more than {SERVER_SHARE} x {card_gb:g} GB: use a larger card or a smaller model"
        )
    if config.vllm_mode == "colocate" and not target_cpu and engine > util * card_gb * GIB:
        out.problems.append(
            f"the colocated engine needs ~{engine / GIB:.1f} GiB (weights + KV cache at max_model_len "
            f"{max_len}) but gets vllm_gpu_memory_utilization {util} x {card_gb:g} GB = "
            f"{util * card_gb:.1f} GB: raise the share, shorten the run, or use vLLM servers"
        )


def _skipped(model: Any) -> str:
    """The frozen parameters a partial sync leaves out, grouped (vision tower, embeddings, norms, ...)."""
    from r1vision.generation.vllm_trl import changing_modules, module_of

    changing = changing_modules(model)
    groups: dict[str, int] = {}
    for name, _ in model.named_parameters():
        if ".lora_" in name:
            continue
        clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if module_of(clean) in changing:
            continue
        leaf = module_of(clean).rsplit(".", 1)[-1]
        group = "vision tower" if "visual" in clean else ("norms" if "norm" in leaf else leaf)
        groups[group] = groups.get(group, 0) + 1
    return ", ".join(f"{k} ({v})" for k, v in sorted(groups.items())) or "nothing"


def main(kind: str, argv: Sequence[str]) -> int:
    """Print the plan; 0 when it can run, 2 (and the reasons) when it cannot."""
    result = plan(kind, list(argv))
    print("\n".join(result.lines))
    if result.problems:
        print("\nREFUSED: this run cannot work as configured:")
        for problem in result.problems:
            print(f"  - {problem}")
        return 2
    print("\nOK: nothing refuses this run (no GPU was touched)")
    return 0
