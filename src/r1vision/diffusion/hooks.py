"""What :class:`~r1vision.diffusion.trainer.DiffusionGRPOTrainer` plugs into transformers and checks before it
starts: the callback that steps Flow-GRPO's EMA and restores a resumed run's state, the DeepSpeed ``auto``
values a diffusers denoiser cannot fill, and the prompt count one generation needs."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback


class RunState(TrainerCallback):
    """Flow-GRPO's EMA after every micro-batch (with the optimizer steps so far) and the resume hook."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        self.trainer._on_train_begin()

    def on_substep_end(self, args, state, control, **kwargs):  # noqa: D102 - a micro-batch without a step
        if self.trainer.ema is not None:
            self.trainer.ema.step(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102 - after each optimizer step
        if self.trainer.ema is not None:
            self.trainer.ema.step(state.global_step)


def check_prompt_count(args: Any, processes: int, train_dataset: Any) -> None:
    """Refuse a training set smaller than one generation's prompts (the epoch would hold no generation)."""
    spg = args.steps_per_generation or args.gradient_accumulation_steps
    need = args.per_device_train_batch_size * processes * spg // args.num_generations
    if train_dataset is not None and len(train_dataset) < need:
        from r1vision.tasks.loading import DatasetValidationError

        raise DatasetValidationError(
            f"the training set has {len(train_dataset)} prompt(s); one generation draws {need} "
            f"(per_device_train_batch_size x processes x steps_per_generation / num_generations)"
        )


def fill_deepspeed_autos(trainer: Any, denoiser: Any) -> None:
    """Fill the DeepSpeed config's hidden-size ``auto`` entries from the denoiser's width (transformers reads
    ``config.hidden_size``, which a diffusers transformer does not have: the shipped zero2.json failed)."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    hf = getattr(plugin, "hf_ds_config", None) or getattr(trainer.args, "hf_deepspeed_config", None)
    if hf is None:
        return
    config = denoiser.config
    width = int(config.get("num_attention_heads", 0) * config.get("attention_head_dim", 0)) or int(
        config.get("joint_attention_dim", 0) or config.get("caption_projection_dim", 0)
    )
    if not width:
        return
    hf.fill_only("zero_optimization.reduce_bucket_size", width * width)
    if hf.is_zero3():
        hf.fill_only("zero_optimization.stage3_prefetch_bucket_size", int(0.9 * width * width))
        hf.fill_only("zero_optimization.stage3_param_persistence_threshold", 10 * width)
