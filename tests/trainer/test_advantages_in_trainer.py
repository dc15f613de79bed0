"""The trainer's advantage_estimator option and an LR schedule sized in optimizer steps."""

import csv

import pytest
import torch

from r1vision.trainer.advantages import compute_advantages
from r1vision.trainer.grpo import VisionGRPOTrainer
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

_TOKEN_COUNTS: list[int] = []


def _some_unscorable(prompts, completions, completion_ids=None, **kwargs):
    """None for every other completion: with no other reward function those are unscorable."""
    _TOKEN_COUNTS[:] = [len(ids) for ids in completion_ids]  # in TRL's order, for MAYE's token weights
    return [None if i % 2 else v for i, v in enumerate(varied_reward(prompts, completions))]


@pytest.mark.parametrize("estimator", ["reinforce_pp", "reinforce_pp_maye", "rloo"])
def test_estimator_replaces_trl_advantages(tiny_model, color_dir, tmp_path, estimator):
    ds = task_rows("color", color_dir).remove_columns(["completion"])
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"),
        [_some_unscorable],
        args=grpo_args(tmp_path, max_steps=1, advantage_estimator=estimator),
        train_dataset=ds,
    )
    trainer.train()
    rewards = trainer._weighted_rewards()
    assert torch.isnan(rewards).sum() == rewards.numel() // 2  # the unscorable ones stay marked
    counts = torch.tensor(_TOKEN_COUNTS)
    expected = compute_advantages(rewards, 4, estimator, token_counts=counts)
    got = torch.cat([b["advantages"] for b in trainer._buffered_inputs])
    # the buffer is shuffled: compare as multisets
    assert torch.allclose(got.sort().values, expected.sort().values, atol=1e-5)
    assert (expected[torch.isnan(rewards)] == 0).all() and (expected != 0).any()  # as TRL's GRPO does
    # the logged advantages are the estimator's, not TRL's GRPO ones
    logged = torch.tensor(list(trainer._logs["advantages"])[-rewards.numel() :])
    torch.testing.assert_close(logged, expected)
    if estimator == "reinforce_pp":  # whitened over the whole batch
        assert abs(expected.mean().item()) < 1e-5


def test_cosine_schedule_does_not_wrap(tiny_model, color_dir, tmp_path):
    """Schedules are sized in optimizer steps, so the cosine decays to the end (see test_maye_recipe.py for MAYE's)."""
    ds = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(
        tmp_path,
        max_steps=6,
        lr_scheduler_type="cosine",
        learning_rate=1e-3,
        steps_per_generation=2,
        per_device_train_batch_size=4,
        num_generations=4,
    )
    VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=ds).train()
    with open(tmp_path / "metrics.csv") as f:
        lrs = [float(r["learning_rate"]) for r in csv.DictReader(f) if r.get("learning_rate")]
    assert len(lrs) == 6
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False)), lrs
    assert lrs[-1] < 0.1 * lrs[0]


@pytest.mark.parametrize("estimator", ["reinforce_pp", "reinforce_pp_maye"])
def test_reinforce_pp_with_one_response_per_prompt(tiny_model, color_dir, tmp_path, estimator):
    import math

    ds = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path, max_steps=2, advantage_estimator=estimator, num_generations=1)
    assert args.num_generations == 1
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=ds)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    assert math.isfinite(trainer.train().training_loss)
    advantages = torch.cat([b["advantages"] for b in trainer._buffered_inputs])
    assert advantages.abs().sum() > 0
    if estimator == "reinforce_pp":  # zero-mean; MAYE's form adds the mean back
        assert abs(advantages.mean().item()) < 1e-5
    assert any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())


def test_group_filtering_keeps_highest_std_groups(tiny_model, color_dir, tmp_path):
    ds = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(
        tmp_path, max_steps=1, per_device_train_batch_size=8, num_generations=4, keep_groups_by_std=0.5
    )
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=ds)
    trainer.train()
    rewards = trainer._weighted_rewards().view(-1, 4)
    stds = rewards.std(dim=1)
    batch = trainer._buffered_inputs[0]
    # the surviving non-zero advantages all belong to the group with the larger std
    best = int(torch.argmax(stds))
    expected = compute_advantages(rewards.flatten(), 4, "grpo").view(-1, 4)
    nonzero = batch["advantages"][batch["advantages"] != 0]
    assert len(nonzero) <= 4
    assert all(any(torch.isclose(v, expected[best]).tolist()) for v in nonzero)
    # the logged advantages are the filtered ones that train, not TRL's unfiltered GRPO values
    logged = torch.tensor(list(trainer._logs["advantages"])[-8:]).view(-1, 4)
    assert (logged[1 - best] == 0).all()
    torch.testing.assert_close(logged[best], expected[best], atol=1e-5, rtol=1e-5)
