"""Configuration dataclasses: ``VisionGRPOConfig`` extends TRL's ``GRPOConfig`` with the vision options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig, SFTConfig

from r1vision.generation.vllm_plan import engine_problems, target_has_cuda
from r1vision.trainer.advantages import resolve_estimator_options
from r1vision.trainer.distributed import prepare_distributed
from r1vision.trainer.merge import silence_peft_deprecation
from r1vision.trainer.output import take_over_push

silence_peft_deprecation()


@dataclass
class VisionOptions:
    """Options shared by GRPO and SFT: where images live, the pixel budget, what to train."""

    image_root: str | None = field(
        default=None,
        metadata={"help": "Directory that relative image paths in the dataset are resolved against."},
    )
    min_pixels: int | None = field(
        default=None,
        metadata={"help": "Minimum image area after resizing (None: the model family's default)."},
    )
    max_pixels: int | None = field(
        default=None,
        metadata={
            "help": "Maximum image area after resizing; bounds the number of image tokens (area / factor²)."
        },
    )
    video_fps: float | None = field(
        default=None,
        metadata={"help": "Frames sampled per second of video (None: 2.0, as qwen-vl-utils)."},
    )
    video_min_frames: int | None = field(
        default=None, metadata={"help": "Fewest frames sampled from a video (None: 4)."}
    )
    video_max_frames: int | None = field(
        default=None,
        metadata={"help": "Most frames sampled from a video (None: 16, Video-R1's training setting)."},
    )
    video_max_frame_pixels: int | None = field(
        default=None,
        metadata={"help": "Largest area of one video frame after resizing (None: 128 tokens' worth)."},
    )
    video_total_pixels: int | None = field(
        default=None,
        metadata={"help": "Area all frames of one video share (None: no shared limit; each frame's own)."},
    )
    validate_rows: int | None = field(
        default=None,
        metadata={
            "help": "Rows checked before training (missing files, corrupt images, image/placeholder counts): "
            "None = all, 0 = none, N = the first N."
        },
    )
    freeze_vision_tower: bool = field(
        default=False, metadata={"help": "Keep the vision encoder (and its merger) frozen."}
    )
    lora_r: int = field(
        default=0, metadata={"help": "LoRA rank; 0 trains all (unfrozen) weights (16 with --use_peft)."}
    )
    lora_alpha: int | None = field(
        default=None, metadata={"help": "LoRA alpha (unset: 32 with --use_peft, as TRL; else 16)."}
    )
    lora_dropout: float | None = field(
        default=None, metadata={"help": "LoRA dropout (unset: 0.05 with --use_peft, as TRL; else 0)."}
    )
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["all-linear-lm"],
        metadata={
            "help": "'all-linear-lm': every linear layer of the language model (never the vision tower), "
            "or module names (space- or comma-separated, as TRL's --lora_target_modules q_proj v_proj)."
        },
    )
    # TRL's ModelConfig flags, so a `trl grpo|sft` command line runs with only `trl` replaced. Mapped onto
    # r1vision's LoRA and TRL's model_init_kwargs in __post_init__.
    use_peft: bool = field(default=False, metadata={"help": "TRL's flag: train LoRA adapters (--lora_r 16)."})
    model_revision: str | None = field(
        default=None, metadata={"help": "TRL's flag: Hub revision of --model."}
    )
    dtype: str | None = field(
        default=None,
        metadata={"help": "TRL's flag: weights dtype ('auto', 'bfloat16', 'float16', 'float32')."},
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "TRL's flag: 'eager', 'sdpa', 'flash_attention_2', ..."}
    )
    lora_target_parameters: list[str] | None = field(
        default=None, metadata={"help": "TRL's flag: parameter names for LoRA (peft target_parameters)."}
    )
    lora_modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "TRL's flag: modules trained in full next to the adapters."}
    )
    lora_task_type: str = field(default="CAUSAL_LM", metadata={"help": "TRL's flag: peft task type."})
    use_rslora: bool = field(default=False, metadata={"help": "TRL's flag: rank-stabilised LoRA."})
    use_dora: bool = field(default=False, metadata={"help": "TRL's flag: weight-decomposed LoRA (DoRA)."})
    load_in_8bit: bool = field(default=False, metadata={"help": "TRL's flag: 8-bit weights (CUDA only)."})
    load_in_4bit: bool = field(
        default=False, metadata={"help": "TRL's flag: 4-bit weights, QLoRA (CUDA only)."}
    )
    bnb_4bit_quant_type: str = field(default="nf4", metadata={"help": "TRL's flag: 'nf4' or 'fp4'."})
    use_bnb_nested_quant: bool = field(default=False, metadata={"help": "TRL's flag: nested quantisation."})
    bnb_4bit_quant_storage: str | None = field(default=None, metadata={"help": "TRL's flag: storage dtype."})
    metrics_csv: bool = field(default=True, metadata={"help": "Write metrics.csv in output_dir."})
    allow_layout_change: bool = field(
        default=False,
        metadata={
            "help": "Resume a checkpoint although its global batch (processes x per-device batch x "
            "accumulation) differs from this run's: the data order and the batches change from there on."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Replace a previous run in output_dir (weights, metrics.csv). Without it, training into a "
            "folder that holds a run stops with a message; --resume_from_checkpoint last continues it."
        },
    )

    def __post_init__(self) -> None:
        refuse_silent_cpu_fallback(self)
        # TRL turns an unset bf16 into True. On a CPU, bf16 autocast runs the Qwen-VL patch embedding
        # (conv3d) on a slow path: training measured 20-40x slower than float32. An explicit value is kept.
        if getattr(self, "bf16", False) is None and not getattr(self, "fp16", False) and _cpu_only(self):
            self.bf16 = False
        # TRL sets the deprecated `gradient_checkpointing` (default True), so transformers warns on every
        # config, recipe or not. Carry the value over to its new name; an explicit new name wins.
        for old, new in (
            ("gradient_checkpointing", "activation_checkpointing"),
            ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
        ):
            if hasattr(self, new) and getattr(self, new) is None and getattr(self, old, None) is not None:
                setattr(self, new, getattr(self, old))
        apply_model_flags(self)
        prepare_run(self)
        super().__post_init__()  # type: ignore[misc]


def prepare_run(args: Any) -> None:
    """What every r1vision training config does before ``TrainingArguments.__post_init__`` (the VLM configs
    and ``DiffusionGRPOConfig`` alike): ``--report_to a b`` / ``a,b`` as a list of trackers,
    ``--resume_from_checkpoint last|true`` as Trainer's ``True``, the CPU DeepSpeed state (it must precede
    the device and DeepSpeed resolution), and the Hub push taken over (one complete upload after training)."""

    report = args.report_to
    if isinstance(report, str) and report not in ("all", "none"):
        report = [report]
    if isinstance(report, list):
        args.report_to = [t.strip() for item in report for t in str(item).split(",") if t.strip()]
    if str(getattr(args, "resume_from_checkpoint", None)).lower() in ("last", "true"):
        args.resume_from_checkpoint = True
    prepare_distributed(args)
    take_over_push(args)


def apply_model_flags(args: Any) -> None:
    """Map TRL's ``ModelConfig`` flags onto r1vision's LoRA fields and TRL's ``model_init_kwargs``.

    ``--use_peft`` turns LoRA on with TRL's defaults for what is unset (r 16, alpha 32, dropout 0.05);
    without it r1vision's (alpha 16, dropout 0). ``--dtype``, ``--attn_implementation``, ``--model_revision``
    and ``--trust_remote_code`` go to the model's ``from_pretrained``. 4/8-bit loading needs a CUDA GPU and
    bitsandbytes: refused here otherwise, before any model loads.
    """
    if args.use_peft and args.lora_r == 0:
        args.lora_r = 16
    if args.lora_alpha is None:
        args.lora_alpha = 32 if args.use_peft else 16
    if args.lora_dropout is None:
        args.lora_dropout = 0.05 if args.use_peft else 0.0
    targets = (
        [args.lora_target_modules] if isinstance(args.lora_target_modules, str) else args.lora_target_modules
    )
    args.lora_target_modules = [
        t.strip() for item in targets or [] for t in str(item).split(",") if t.strip()
    ]
    if not args.lora_target_modules:
        args.lora_target_modules = ["all-linear-lm"]
    kwargs = dict(args.model_init_kwargs or {})
    if args.dtype is None and "dtype" not in kwargs and _loads_bf16_by_default(args):
        # TRL loads float32 unless told: on a GPU that doubles the weights and every sync's tensors
        # (a 7B model: 31 GiB instead of 15). bf16 mixed precision trains bf16 weights as TRL's recipes do.
        kwargs["dtype"] = "bfloat16"
    if args.attn_implementation is None and "attn_implementation" not in kwargs and _flash_attention_usable():
        kwargs["attn_implementation"] = "flash_attention_2"
    for key, value in (
        ("dtype", args.dtype),
        ("attn_implementation", args.attn_implementation),
        ("revision", args.model_revision),
        ("trust_remote_code", True if getattr(args, "trust_remote_code", False) else None),
    ):
        if value is not None:
            kwargs[key] = value
    if args.load_in_4bit or args.load_in_8bit:
        flag = "--load_in_4bit" if args.load_in_4bit else "--load_in_8bit"
        import importlib.util

        import torch

        if _cpu_only(args) or not torch.cuda.is_available():
            raise ValueError(
                f"{flag} needs a CUDA GPU (bitsandbytes quantisation); on this machine use "
                "--use_peft without it"
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ValueError(f"{flag} needs bitsandbytes: pip install bitsandbytes")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=args.load_in_4bit,
            load_in_8bit=args.load_in_8bit,
            bnb_4bit_compute_dtype=kwargs.get("dtype") if kwargs.get("dtype") not in (None, "auto") else None,
            bnb_4bit_quant_type=args.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=args.use_bnb_nested_quant,
            bnb_4bit_quant_storage=args.bnb_4bit_quant_storage,
        )
        kwargs.setdefault("device_map", {"": torch.cuda.current_device()})
    args.model_init_kwargs = kwargs or None


def _loads_bf16_by_default(args: Any) -> bool:
    """On a CUDA GPU with bf16 mixed precision (TRL's default) and no dtype given: load the weights bf16."""
    import torch

    if (
        getattr(args, "use_cpu", False)
        or getattr(args, "fp16", False)
        or getattr(args, "bf16", None) is False
    ):
        return False
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def _flash_attention_usable() -> bool:
    """flash-attn installed and an Ampere-or-newer GPU: what ``attn_implementation`` defaults to then (the
    vision tower's window attention and long rollouts are much faster than with sdpa)."""
    import importlib.util

    import torch

    if not torch.cuda.is_available() or importlib.util.find_spec("flash_attn") is None:
        return False
    return torch.cuda.get_device_capability()[0] >= 8


def lora_extras(args: Any) -> dict[str, Any]:
    """The peft ``LoraConfig`` options beyond rank, alpha, dropout and targets (TRL's ModelConfig flags)."""
    return {
        "use_rslora": args.use_rslora,
        "use_dora": args.use_dora,
        "modules_to_save": args.lora_modules_to_save,
        "target_parameters": args.lora_target_parameters,
        "task_type": args.lora_task_type,
    }


def nvidia_gpus() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists (empty without the tool or a driver)."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return (
        [line for line in out.stdout.splitlines() if line.startswith("GPU ")] if out.returncode == 0 else []
    )


def refuse_silent_cpu_fallback(args: Any) -> None:
    """Stop a run that would train on the CPU of a GPU machine by accident: ``nvidia-smi`` lists GPUs but
    torch cannot use CUDA (typically a driver older than the CUDA build of torch: torch 2.13's wheels need
    driver >= 580). ``--use_cpu true`` trains on the CPU on purpose."""
    if getattr(args, "use_cpu", False):
        return
    import torch

    if torch.cuda.is_available():
        return
    gpus = nvidia_gpus()
    if gpus:
        raise ValueError(
            f"nvidia-smi lists {len(gpus)} GPU(s) but torch {torch.__version__} (CUDA {torch.version.cuda}) "
            "cannot use them, so this run would train on the CPU: check the driver (torch 2.13's CUDA 13 "
            "build needs driver >= 580; bash install.sh checks it), or pass --use_cpu true to train on the "
            "CPU on purpose"
        )


def _cpu_only(args: object) -> bool:
    """True when training will run on the CPU: ``use_cpu``, or no CUDA/XPU/NPU/MPS device."""
    import torch

    if getattr(args, "use_cpu", False):
        return True
    backends = (torch.cuda, getattr(torch, "xpu", None), getattr(torch, "npu", None))
    if any(b is not None and b.is_available() for b in backends):
        return False
    return not torch.backends.mps.is_available()


@dataclass
class VisionGRPOConfig(VisionOptions, GRPOConfig):
    """TRL's ``GRPOConfig`` plus image handling, pixel budget, vision freezing/LoRA and the advantage estimator."""

    advantage_estimator: str = field(
        default="grpo",
        metadata={
            "help": "'grpo' (TRL's group-normalised advantages), 'reinforce_pp' (Reinforce++: one value per "
            "completion whitened over the global batch), 'reinforce_pp_maye' (MAYE's exact form: whitened "
            "over each process's tokens, mean added back) or 'rloo' (leave-one-out baseline)."
        },
    )
    scale_rewards: str | None = field(
        default=None,
        metadata={
            "help": "'group', 'batch' or 'none'; unset = the estimator's default (grpo: 'group' as in TRL, "
            "reinforce_pp: 'batch', rloo: 'none'). A value the estimator cannot honour is refused."
        },
    )

    generation_backend: str = field(
        default="hf",
        metadata={
            "help": "'hf' (transformers generate), 'vllm_colocate' (one in-process vLLM engine per training "
            "process: TRL's colocate mode with r1vision's VLM fixes) or 'vllm_server' (TRL's server mode, or "
            "r1vision's per-rank servers with vllm_server_per_rank). Sets use_vllm / vllm_mode."
        },
    )
    vllm_server_per_rank: bool = field(
        default=False,
        metadata={
            "help": "Server mode with one r1vision vLLM server per training process, at vllm_server_host:"
            "vllm_server_port + local rank (start them with `r1vision vllm-serve --num-servers N`): each "
            "process generates its own prompts there and pushes its weights over HTTP (works on CPU)."
        },
    )
    vllm_lora_adapters: bool = field(
        default=False,
        metadata={
            "help": "With LoRA and vllm_colocate or per-rank servers: each weight sync sends the LoRA adapter to "
            "vLLM's LoRA support (enable_lora; servers: --max-lora-rank) instead of merged weights: MBs per "
            "sync instead of every adapted layer's full weight; the engine's base weights never change. "
            "Ignored with generation_backend hf."
        },
    )
    max_images_per_prompt: int = field(
        default=1, metadata={"help": "Most images in a prompt: vLLM's limit_mm_per_prompt."}
    )
    max_videos_per_prompt: int = field(
        default=1,
        metadata={
            "help": "Most videos in a prompt of a video dataset: vLLM's limit_mm_per_prompt (0 for image "
            "datasets). With the video_* budget it adds each video's most tokens to max_model_len."
        },
    )
    max_prompt_text_tokens: int = field(
        default=1024,
        metadata={
            "help": "Text tokens of the longest prompt (image tokens not counted). With the images at the "
            "pixel budget and max_completion_length it sets vLLM's max_model_len unless "
            "vllm_max_model_length is given; a longer prompt is refused at rollout time."
        },
    )
    keep_groups_by_std: float = field(
        default=1.0,
        metadata={
            "help": "Fraction of prompt groups that train each step (rounded up, at least one): those with "
            "the highest reward std (R1-SGG-style group filtering); the others get zero advantage. 1.0 keeps all."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling: train each step only on prompt groups whose rewards differ, "
            "generating for more prompts (drawn at random from the training set) until the generation batch "
            "is full of them or dynamic_sampling_max_rounds is reached. Metrics: dynamic_sampling/rounds, "
            "dynamic_sampling/prompts_drawn, dynamic_sampling/groups_with_spread."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=10,
        metadata={
            "help": "Most generation rounds per generation batch under dynamic_sampling (DAPO's recipe: 10); "
            "at the cap the batch is completed with flat groups (zero advantage) and a warning."
        },
    )

    def __post_init__(self) -> None:
        backends = {"hf": None, "vllm_colocate": "colocate", "vllm_server": "server"}
        if self.generation_backend not in backends:
            raise ValueError(
                f"generation_backend={self.generation_backend!r}; choose one of {', '.join(backends)}"
            )
        if backends[self.generation_backend] is not None:
            self.use_vllm, self.vllm_mode = True, backends[self.generation_backend]
        elif self.use_vllm:  # TRL's own switch still works; keep the two fields in agreement
            self.generation_backend = f"vllm_{self.vllm_mode}"
        if self.vllm_server_per_rank and not (self.use_vllm and self.vllm_mode == "server"):
            raise ValueError("vllm_server_per_rank needs generation_backend='vllm_server'")
        # Without vLLM there is no sync to change (a recipe switched to hf generation keeps working); TRL's
        # single server receives weights over NCCL, which has no adapter path.
        if (
            self.vllm_lora_adapters
            and self.use_vllm
            and self.vllm_mode == "server"
            and not self.vllm_server_per_rank
        ):
            raise ValueError(
                "vllm_lora_adapters needs generation_backend='vllm_colocate' or per-rank servers "
                "(vllm_server with vllm_server_per_rank)"
            )
        if not 0.0 < self.keep_groups_by_std <= 1.0:
            raise ValueError(f"keep_groups_by_std must be in (0, 1], got {self.keep_groups_by_std}")
        if self.dynamic_sampling:
            if self.dynamic_sampling_max_rounds < 1:
                raise ValueError(
                    f"dynamic_sampling_max_rounds must be >= 1, got {self.dynamic_sampling_max_rounds}"
                )
            if self.keep_groups_by_std < 1.0:
                raise ValueError(
                    "dynamic_sampling replaces flat groups, keep_groups_by_std zeroes them: choose one"
                )
            if self.num_generations < 2 or self.advantage_estimator not in ("grpo", "rloo"):
                raise ValueError(  # a batch-whitened estimator gives flat groups a signal: nothing to replace
                    "dynamic_sampling needs groups (num_generations >= 2) and a group baseline (grpo, rloo); "
                    f"advantage_estimator={self.advantage_estimator!r} with num_generations={self.num_generations}"
                )

        # Refuse here, before a model is loaded, what the estimator would otherwise silently ignore.
        self.scale_rewards = resolve_estimator_options(
            self.advantage_estimator, self.scale_rewards, self.multi_objective_aggregation
        )
        # Reinforce++ whitens over the whole batch, so one response per prompt is valid (MAYE's setting);
        # TRL's config check assumes group baselines and demands two. Let it pass, then restore one.
        single = self.advantage_estimator.startswith("reinforce_pp") and self.num_generations == 1
        if single:
            self.num_generations = 2
        super().__post_init__()
        if single:
            self.num_generations = 1
        elif self.advantage_estimator == "rloo" and self.num_generations < 2:
            raise ValueError("advantage_estimator='rloo' needs num_generations >= 2 (leave-one-out baseline)")
        _refuse_engine_problems(self)


def _refuse_engine_problems(args: VisionGRPOConfig) -> None:
    """vLLM settings that cannot work together fail here, before any model or GPU is touched."""

    problems = engine_problems(args, cuda=target_has_cuda(args))
    if problems:
        raise ValueError("vLLM settings that cannot work: " + "; ".join(problems))


@dataclass
class VisionSFTConfig(VisionOptions, SFTConfig):
    """TRL's ``SFTConfig`` plus the same image options, so SFT sees exactly what GRPO will see."""

    # TRL's 1024 is shorter than one 1024x1024 photo at Qwen's default budget (1,296 image tokens), and
    # truncating image tokens fails in step 1. Unset: no truncation; a value is checked per row up front.
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest tokenized sequence (prompt + image tokens + target). Unset: no truncation. A value "
            "shorter than some row stops before training with that row's needed length."
        },
    )
