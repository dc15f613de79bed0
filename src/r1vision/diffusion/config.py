"""``DiffusionGRPOConfig``: transformers' ``TrainingArguments`` plus Flow-GRPO's settings, under TRL's names
where TRL has one (``num_generations``, ``beta``, ``epsilon``, ``scale_rewards``, ``reward_weights``).

Defaults are Flow-GRPO's SD3.5-M OCR recipe (``config/grpo.py::general_ocr_sd3`` and ``config/base.py``):
512 px, 10 sampling steps for training and 40 for evaluation, CFG 4.5 inside the policy, noise level 0.7,
9 of 10 transitions trained, PPO clip 1e-4, KL 0.04 to the adapter-off model, batch-std advantages clipped
at 5, zero-advantage samples dropped, LoRA r 32 / alpha 64 on the attention projections, EMA 0.9 every 8
steps, AdamW lr 3e-4 (weight decay 1e-4, eps 1e-8), gradient norm 1.0, seed 42.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from r1vision.diffusion.families import SD3_LORA_TARGETS


@dataclass
class DiffusionGRPOConfig(TrainingArguments):
    """Flow-GRPO for flow-matching text-to-image models (see the module docstring for the defaults)."""

    num_generations: int = field(default=24, metadata={"help": "Images per prompt (the GRPO group)."})
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
        default="flow_grpo", metadata={"help": "'flow_grpo', 'cps' (Flow-GRPO-Fast) or 'ode'."}
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
    scale_rewards: str = field(default="batch", metadata={"help": "'batch' (global std), 'group' or 'none'."})
    adv_clip_max: float = field(default=5.0, metadata={"help": "Advantages are clipped to +-this."})
    drop_zero_advantage: bool = field(
        default=True, metadata={"help": "Leave zero-advantage samples out of the loss."}
    )
    rollout_batch_size: int = field(
        default=0,
        metadata={
            "help": "Images sampled at once (Flow-GRPO's sample.train_batch_size); 0 = the whole step. The "
            "rewards of one batch run while the next is sampled, and a smaller batch lowers the rollout's memory."
        },
    )
    same_latent: bool = field(
        default=False, metadata={"help": "One initial noise per group (Flow-GRPO's same_latent)."}
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
    ema_update_interval: int = field(default=8, metadata={"help": "Optimizer steps between EMA updates."})
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
    # Flow-GRPO's optimizer and run settings as defaults
    learning_rate: float = 3e-4
    weight_decay: float = 1e-4
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    seed: int = 42
    logging_steps: float = 1
    remove_unused_columns: bool = False

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
        if self.same_latent and self.rollout_batch_size % self.num_generations:
            raise ValueError(
                f"same_latent needs whole groups per rollout batch: rollout_batch_size={self.rollout_batch_size}"
                f" is not a multiple of num_generations={self.num_generations}"
            )
        if self.resolution % 16:
            raise ValueError(f"resolution must be a multiple of 16, got {self.resolution}")
        self.remove_unused_columns = False  # rows are prompts: nothing to match against a forward signature
        # diffusers models turn checkpointing on with enable_gradient_checkpointing(), which Trainer does not
        # call: the trainer does it on the denoiser itself (DiffusionGRPOTrainer.__init__)
        self.denoiser_checkpointing = bool(getattr(self, "gradient_checkpointing", False)) or bool(
            getattr(self, "activation_checkpointing", False)
        )
        for name in ("gradient_checkpointing", "activation_checkpointing"):
            if getattr(self, name, None):
                setattr(self, name, False)
        super().__post_init__()
