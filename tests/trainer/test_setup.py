"""LoRA without the vision tower and vision freezing leave vision weights bit-identical."""

import math

import torch

from r1vision.trainer.grpo import VisionGRPOTrainer
from r1vision.trainer.setup import is_vision_param
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_lora_with_frozen_vision(tiny_model, color_dir, tmp_path):
    ds = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path, lora_r=8, lora_alpha=16, freeze_vision_tower=True)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_5_vl"), [varied_reward], args=args, train_dataset=ds)
    lora_names = [n for n, _ in trainer.model.named_parameters() if "lora_" in n]
    assert lora_names and not any(is_vision_param(n) for n in lora_names), (
        "adapters must skip the vision tower"
    )
    assert all("language_model" in n for n in lora_names)
    before = _snapshot(trainer.model)
    assert math.isfinite(trainer.train().training_loss)
    after = _snapshot(trainer.model)
    vision = [n for n in before if is_vision_param(n)]
    assert vision and all(torch.equal(before[n], after[n]) for n in vision)
    assert any(not torch.equal(before[n], after[n]) for n in lora_names), "LoRA weights did not train"


def test_freeze_vision_full_finetune(tiny_model, color_dir, tmp_path):
    ds = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path, freeze_vision_tower=True)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=ds)
    before = _snapshot(trainer.model)
    trainer.train()
    after = _snapshot(trainer.model)
    vision = [n for n in before if is_vision_param(n)]
    language = [n for n in before if not is_vision_param(n)]
    assert all(torch.equal(before[n], after[n]) for n in vision)
    assert any(not torch.equal(before[n], after[n]) for n in language)


def test_lora_does_not_backpropagate_through_the_frozen_vision_tower(tiny_model, color_dir, tmp_path):
    """TRL's enable_input_require_grads (LoRA + gradient checkpointing) hooked visual.patch_embed too, so the
    frozen tower's output required grad; only the language model's embedding hook may stay."""
    rows = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path, lora_r=4, gradient_checkpointing=True, max_steps=1)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), varied_reward, args=args, train_dataset=rows)
    owners = [name for name, module in trainer.model.named_modules() if module._forward_hooks]
    hooked = [n for n in owners if n.endswith(("patch_embed", "embed_tokens"))]
    assert hooked and all("visual" not in n for n in hooked), hooked
    visual = trainer.model.get_base_model().model.visual
    pixels = torch.randn(4, visual.patch_embed.proj.in_channels * 2 * 14 * 14)
    with torch.enable_grad():
        assert not visual.patch_embed(pixels).requires_grad  # nothing to backpropagate into
    trainer.train()  # and it still trains


def test_the_lora_adapter_init_follows_the_seed_not_the_process(tiny_model, color_dir, tmp_path):
    """The adapter's random init follows --seed, not the process's RNG state (a guard: the text-to-image
    trainer had it wrong, and a sweep's seeds must not all start from one adapter)."""
    rows = task_rows("color", color_dir).remove_columns(["completion"])

    def adapter(seed: int, name: str) -> list[torch.Tensor]:
        args = grpo_args(tmp_path / name, lora_r=4, seed=seed)
        trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), varied_reward, args=args, train_dataset=rows)
        return [p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_A" in n]

    first = adapter(0, "a")
    torch.rand(1000)  # whatever the process did in between
    again, other = adapter(0, "b"), adapter(1, "c")
    assert first and all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, c) for a, c in zip(first, other, strict=True))
