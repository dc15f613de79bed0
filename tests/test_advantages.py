"""Advantage estimators against hand computation: GRPO (TRL), Reinforce++ (MAYE), RLOO, k3 KL."""

from __future__ import annotations

import math

import pytest
import torch

from r1vision.trainer.advantages import (
    compute_advantages,
    k3_kl,
    masked_var,
    masked_whiten,
    reinforce_pp_token_advantages,
)


def test_reinforce_pp_whitens_over_the_whole_batch() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    # mean 4/6 = 2/3; unbiased var = sum((r-2/3)^2)/(6-1) = (4*(1/9) + 2*(4/9))/5 = (12/9)/5 = 4/15
    mean, var = 2 / 3, 4 / 15
    expected = torch.tensor([(r - mean) / math.sqrt(var + 1e-8) for r in rewards.tolist()])
    out = compute_advantages(rewards, num_generations=2, estimator="reinforce_pp")
    torch.testing.assert_close(out, expected)
    # unlike GRPO, the groups play no part: the same rewards with G=1 or G=3 give the same advantages
    torch.testing.assert_close(compute_advantages(rewards, 1, "reinforce_pp"), expected)
    torch.testing.assert_close(compute_advantages(rewards, 3, "reinforce_pp"), expected)


def test_reinforce_pp_one_response_per_prompt_and_mask() -> None:
    rewards = torch.tensor([2.0, 4.0, 9.0, 100.0])
    mask = torch.tensor([True, True, True, False])
    # masked: values 2, 4, 9 -> mean 5, unbiased var (9 + 1 + 16) / 2 = 13
    out = compute_advantages(rewards, 1, "reinforce_pp", mask=mask)
    expected = torch.tensor([-3 / math.sqrt(13), -1 / math.sqrt(13), 4 / math.sqrt(13), 0.0])
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


def test_grpo_matches_trl_formula() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0])
    out = compute_advantages(rewards, 3, "grpo")
    # group 1: mean 1/3, std (unbiased) sqrt(((2/3)^2 + 2*(1/3)^2)/2) = sqrt(1/3)
    s1 = math.sqrt(1 / 3)
    # group 2: mean 2, std sqrt((4 + 0 + 4)/2) = 2
    expected = torch.tensor(
        [(2 / 3) / (s1 + 1e-4), (-1 / 3) / (s1 + 1e-4), (-1 / 3) / (s1 + 1e-4), -2 / 2.0001, 0, 2 / 2.0001]
    )
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    none = compute_advantages(rewards, 3, "grpo", scale_rewards="none")
    torch.testing.assert_close(none, torch.tensor([2 / 3, -1 / 3, -1 / 3, -2.0, 0.0, 2.0]))
    batch = compute_advantages(rewards, 3, "grpo", scale_rewards="batch")
    torch.testing.assert_close(batch, none / (rewards.std() + 1e-4))
    # a group with equal rewards gets zero advantage, not NaN
    flat = compute_advantages(torch.tensor([1.0, 1.0]), 2, "grpo")
    assert torch.equal(flat, torch.zeros(2))


def test_rloo_leave_one_out() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, 5.0, 7.0])
    out = compute_advantages(rewards, 3, "rloo")
    # group 1: 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5 (twice); group 2: 3-6, 5-5, 7-4
    torch.testing.assert_close(out, torch.tensor([1.0, -0.5, -0.5, -3.0, 0.0, 3.0]))
    with pytest.raises(ValueError, match="num_generations >= 2"):
        compute_advantages(rewards, 1, "rloo")


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        compute_advantages(torch.zeros(4), 2, "ppo")
    with pytest.raises(ValueError, match="groups of num_generations=3"):
        compute_advantages(torch.zeros(4), 3, "grpo")
    with pytest.raises(ValueError, match="scale_rewards"):
        compute_advantages(torch.zeros(4), 2, "grpo", scale_rewards="median")


def test_masked_var_and_whiten() -> None:
    x = torch.tensor([[1.0, 3.0, 0.0], [5.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert masked_var(x, mask).item() == pytest.approx(4.0)  # values 1, 3, 5: mean 3, (4+0+4)/2
    w = masked_whiten(x, mask)
    torch.testing.assert_close(w, torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), atol=1e-6, rtol=1e-6)
    assert masked_var(torch.tensor([7.0])).item() == 0.0


def test_k3_kl() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.0, -1.5, -1.0])
    d = ref - logp
    torch.testing.assert_close(k3_kl(logp, ref), torch.exp(d) - d - 1)
    assert k3_kl(logp, ref)[0].item() == 0.0 and (k3_kl(logp, ref) >= 0).all()


def test_token_level_reinforce_pp_by_hand() -> None:
    scores = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    kl = torch.tensor([[0.1, 0.2, 9.0], [0.0, 0.1, 0.3]])
    out = reinforce_pp_token_advantages(scores, mask, kl=kl, kl_coef=0.5, gamma=1.0)
    # per-token rewards: row 0: [-0.05, -0.1 + 1], row 1: [0, -0.05, -0.15]; returns are suffix sums
    returns = torch.tensor([[0.85, 0.9, 0.0], [-0.2, -0.2, -0.15]])
    valid = returns[mask]
    mean, var = valid.mean(), valid.var(unbiased=True)
    expected = (returns - mean) / torch.sqrt(var + 1e-8) * mask
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
