"""``DiffusionGRPOConfig``: transformers' ``TrainingArguments`` plus Flow-GRPO's settings, under TRL's names
where TRL has one (``num_generations``, ``steps_per_generation``, ``beta``, ``epsilon``, ``scale_rewards``,
``reward_weights``).

Batch sizes count images, as TRL's count completions: ``per_device_train_batch_size`` images per process and
micro-step (Flow-GRPO's ``train.batch_size``); one rollout samples the *generation batch*,
``per_device_train_batch_size x processes x steps_per_generation`` images in groups of ``num_generations``
(Flow-GRPO's epoch: ``sample.train_batch_size x GPUs x num_batches_per_epoch``).

Defaults are Flow-GRPO's SD3.5-M OCR recipe (``config/grpo.py::general_ocr_sd3``, ``config/base.py`` and
``scripts/train_sd3.py``): 512 px, 10 sampling steps for training and 40 for evaluation, CFG 4.5 inside the
policy, noise level 0.7, 9 of 10 transitions trained, PPO clip 1e-4, KL 0.04 to the adapter-off model divided
by the step's ``std_dev_t**2`` (no ``|dt|``), advantages from per-prompt statistics over every process with
the whole step's std, clipped at 5, zero-advantage samples dropped, group copies shuffled over the
generation batch, LoRA r 32 / alpha 64 on the ``attn`` projections of both streams, EMA 0.9 on Flow-GRPO's
schedule, AdamW lr 3e-4 constant (weight decay 1e-4, eps 1e-8), gradient norm 1.0, seed 42.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from transformers import TrainingArguments

from r1vision.diffusion.families import SD3_LORA_TARGETS


@dataclass
class DiffusionGRPOConfig(TrainingArguments):
    """Flow-GRPO for flow-matching text-to-image models (see the module docstring for the defaults)."""

    num_generations: int = field(default=24, metadata={"help": "Images per prompt (the GRPO group)."})
    steps_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Micro-steps fed by one rollout (TRL's name; default gradient_accumulation_steps). 2 x "
            "gradient_accumulation_steps is Flow-GRPO's epoch of two updates, the second off-policy."
        },
    )
    spread_groups: bool = field(
        default=True,
        metadata={
            "help": "Shuffle each group's images over the whole generation batch, so a group spans processes "
            "(Flow-GRPO's DistributedKRepeatSampler); false keeps them consecutive (TRL's RepeatSampler)."
        },
    )
    num_inference_steps: int = field(default=10, metadata={"help": "Sampling steps of a training rollout."})
    eval_num_inference_steps: int = field(
        default=40, metadata={"help": "Sampling steps of the evaluation (ODE)."}
    )
    guidance_scale: float = field(
        default=4.5, metadata={"help": "Classifier-free guidance (inside the policy)."}
    )
    resolution: int = field(default=512, metadata={"help": "Image side in pixels."})
    noise_level: float = field(default=0.7, metadata={"help": "SDE noise level (0: deterministic ODE)."})
    sde_kind: str = field(
        default="flow_grpo",
        metadata={"help": "'flow_grpo' or 'cps' (coefficient-preserving, Flow-GRPO-Fast)."},
    )
    sde_window_size: int = field(
        default=0,
        metadata={"help": "Transitions sampled with the SDE (and trained); 0 = all (Flow-GRPO-Fast: 3)."},
    )
    sde_window_range: list[int] | None = field(
        default=None, metadata={"help": "[low, high]: where the SDE window may start (Flow-GRPO-Fast: 0 5)."}
    )
    timestep_fraction: float = field(default=0.99, metadata={"help": "Share of the SDE transitions trained."})
    epsilon: float = field(default=1e-4, metadata={"help": "PPO clip range of the probability ratio."})
    beta: float = field(
        default=0.04, metadata={"help": "KL coefficient (reference: the model without its adapter)."}
    )
    kl_use_dt: bool = field(
        default=False,
        metadata={
            "help": "Divide the KL by the transition's variance (std_dev_t**2 |dt|, the Gaussian KL: 3.7-25x "
            "larger at 10 steps) instead of Flow-GRPO's std_dev_t**2 (VRL's flow_kl_use_dt)."
        },
    )
    scale_rewards: str = field(default="batch", metadata={"help": "'batch' (global std), 'group' or 'none'."})
    adv_clip_max: float = field(default=5.0, metadata={"help": "Advantages are clipped to +-this."})
    drop_zero_advantage: bool = field(
        default=True, metadata={"help": "Leave zero-advantage samples out of the loss."}
    )
    rollout_batch_size: int = field(
        default=0,
        metadata={
            "help": "Images sampled at once; 0 = per_device_train_batch_size (Flow-GRPO's sample.train_batch_size). "
            "The rewards of one batch run while the next is sampled, and a smaller batch lowers the rollout's memory."
        },
    )
    same_latent: bool = field(
        default=False,
        metadata={"help": "One initial noise per group, on every process (Flow-GRPO's same_latent)."},
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward (default 1)."}
    )
    lora_r: int = field(default=32, metadata={"help": "LoRA rank on the denoiser; 0 trains it in full."})
    lora_alpha: int = field(default=64, metadata={"help": "LoRA alpha."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: list(SD3_LORA_TARGETS), metadata={"help": "Denoiser modules with adapters."}
    )
    ema: bool = field(
        default=True, metadata={"help": "Keep an EMA of the trained weights (eval and export)."}
    )
    ema_decay: float = field(default=0.9, metadata={"help": "EMA decay (warmed up as Flow-GRPO)."})
    ema_update_interval: int = field(
        default=8,
        metadata={
            "help": "The EMA moves after each micro-batch of every N-th update (Flow-GRPO's schedule)."
        },
    )
    eval_num_images: int = field(
        default=16, metadata={"help": "Evaluation prompts (first N of the eval split)."}
    )
    eval_seed: int = field(
        default=0, metadata={"help": "Seed of the evaluation's noise (fixed across evals)."}
    )
    denoiser_dtype: str = field(
        default="float32",
        metadata={"help": "Denoiser weights: float32 (VRL: fp16 killed the signal) or bfloat16."},
    )
    max_sequence_length: int | None = field(
        default=None, metadata={"help": "T5 tokens (default: the model's, 128)."}
    )
    metrics_csv: bool = field(default=True, metadata={"help": "Write metrics.csv in output_dir."})
    allow_layout_change: bool = field(
        default=False,
        metadata={
            "help": "Resume a checkpoint although its optimizer batch (processes x per-device images x "
            "accumulation) or generation batch differs from this run's: the prompts and batches change from there on."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Replace a previous run in output_dir. Without it, training into a folder that holds a run "
            "stops with a message; --resume_from_checkpoint last continues it."
        },
    )
    # Flow-GRPO's optimizer and run settings as defaults
    learning_rate: float = 3e-4
    lr_scheduler_type: str = field(default="constant", metadata={"help": "Flow-GRPO keeps the LR constant."})
    weight_decay: float = 1e-4
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    seed: int = 42
    logging_steps: float = 1
    remove_unused_columns: bool = False
    ddp_find_unused_parameters: bool | None = field(
        default=False,
        metadata={
            "help": "Every trained weight is used in every forward: DDP need not search for unused ones."
        },
    )

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2 (a group needs two images), got {self.num_generations}"
            )
        if self.scale_rewards not in ("batch", "group", "none"):
            raise ValueError(f"scale_rewards={self.scale_rewards!r}; choose batch, group or none")
        if self.sde_kind not in ("flow_grpo", "cps", "ode"):
            raise ValueError(f"sde_kind={self.sde_kind!r}; choose flow_grpo, cps or ode")
        if not 0 < self.timestep_fraction <= 1:
            raise ValueError(f"timestep_fraction must be in (0, 1], got {self.timestep_fraction}")
        if self.denoiser_dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"denoiser_dtype={self.denoiser_dtype!r}; choose float32, bfloat16 or float16")
        if self.rollout_batch_size < 0:
            raise ValueError(f"rollout_batch_size must be >= 0, got {self.rollout_batch_size}")
        if self.steps_per_generation is not None and self.steps_per_generation < 1:
            raise ValueError(f"steps_per_generation must be >= 1, got {self.steps_per_generation}")
        if self.sde_kind == "ode" or self.noise_level <= 0:
            raise ValueError(
                "nothing to train: with sde_kind 'ode' or noise_level 0 every transition is deterministic "
                "(no log-density); use sde_kind flow_grpo or cps with noise_level > 0"
            )
        if self.resolution < 16 or self.resolution % 16:
            raise ValueError(f"resolution must be a positive multiple of 16, got {self.resolution}")
        self.remove_unused_columns = False  # rows are prompts: nothing to match against a forward signature
        # diffusers models turn checkpointing on with enable_gradient_checkpointing(), which Trainer does not
        # call: the trainer does it on the denoiser itself (DiffusionGRPOTrainer.__init__)
        self.denoiser_checkpointing = bool(getattr(self, "gradient_checkpointing", False)) or bool(
            getattr(self, "activation_checkpointing", False)
        )
        for name in ("gradient_checkpointing", "activation_checkpointing"):
            if getattr(self, name, None):
                setattr(self, name, False)
        from r1vision.trainer.config import prepare_run

        prepare_run(self)
        super().__post_init__()
        plugin = getattr(self, "deepspeed_plugin", None)
        if plugin is not None and int(getattr(plugin, "zero_stage", 0) or 0) == 3:
            raise ValueError(
                "DeepSpeed ZeRO-3 is not supported by the text-to-image trainer yet (it would partition the frozen "
                "text encoders and the EMA); use DDP (--accelerate_config ddp) or ZeRO-2 (--accelerate_config zero2)"
            )
        if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
            raise ValueError(
                "FSDP is not supported by the text-to-image trainer yet (the LoRA denoiser fits one GPU and "
                "the EMA is kept per rank); use DDP (--accelerate_config ddp) or ZeRO-2 (--accelerate_config zero2)"
            )
        if self.world_size > 1:  # a launched run; one process is checked by the runner (a dry run plans N)
            self.check_generation_layout(self.world_size)

    def check_generation_layout(self, processes: int) -> None:
        """Refuse a generation batch that cannot be formed: it must split into whole groups and feed whole
        optimizer steps."""
        spg = self.steps_per_generation or self.gradient_accumulation_steps
        images = self.per_device_train_batch_size * processes * spg
        if images % self.num_generations:
            raise ValueError(
                f"a generation batch of {images} images (per_device_train_batch_size {self.per_device_train_batch_size}"
                f" x {processes} process(es) x steps_per_generation {spg}) does not split into groups of "
                f"num_generations={self.num_generations}; change one of them, or the process count "
                "(--num_processes N)"
            )
        if spg % self.gradient_accumulation_steps:
            raise ValueError(
                f"steps_per_generation={spg} is not a multiple of gradient_accumulation_steps="
                f"{self.gradient_accumulation_steps}: a generation must feed whole optimizer steps"
            )
