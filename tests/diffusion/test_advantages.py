"""Advantages equal Flow-GRPO's PerPromptStatTracker (grouped by prompt text, population std + 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from r1vision.diffusion.advantages import group_advantages


def flow_grpo_tracker(prompts, rewards, global_std):
    """Flow-GRPO's flow_grpo/stat_tracking.py PerPromptStatTracker.update (type 'grpo'), one epoch."""
    prompts, rewards = np.array(prompts), np.array(rewards, dtype=np.float64)
    out = np.zeros_like(rewards)
    for prompt in np.unique(prompts):
        group = rewards[prompts == prompt]
        std = (np.std(rewards) if global_std else np.std(group)) + 1e-4
        out[prompts == prompt] = (group - group.mean()) / std
    return out


@pytest.mark.parametrize("scale", ["batch", "group"])
def test_matches_flow_grpos_tracker(scale):
    rng = np.random.default_rng(0)
    prompts = ["a", "b", "c", "a", "b", "c", "a", "b"] * 2  # a prompt drawn twice forms one bigger group
    rewards = rng.random(len(prompts)).tolist()
    ours, stats = group_advantages(prompts, torch.tensor(rewards), scale, adv_clip_max=100.0)
    want = flow_grpo_tracker(prompts, rewards, global_std=scale == "batch")
    assert np.allclose(ours.numpy(), want, atol=1e-6)
    assert stats["zero_std_ratio"] == 0.0 and stats["group_size"] == pytest.approx(16 / 3)


def test_clip_and_zero_std_groups():
    prompts = ["a"] * 4 + ["b"] * 4
    rewards = torch.tensor([0.0, 0.0, 0.0, 100.0, 1.0, 1.0, 1.0, 1.0])
    adv, stats = group_advantages(prompts, rewards, "group", adv_clip_max=1.5)
    assert adv.max() == 1.5 and (adv[4:] == 0).all()
    assert stats["zero_std_ratio"] == 0.5 and stats["adv_zero_rate"] == 0.5
    centred, _ = group_advantages(prompts, rewards, "none", adv_clip_max=1e9)
    assert torch.allclose(centred[:4], torch.tensor([-25.0, -25.0, -25.0, 75.0]))
