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
    resolve_estimator_options,
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


# ------------------------------------------------------------------------------ MAYE's exact form
def test_reinforce_pp_maye_by_hand() -> None:
    """Two processes of two completions. Hand computation of MAYE's per-GPU, per-token whitening + mean.

    Process 0: rewards 1 (1 token) and 0 (3 tokens): token values [1, 0, 0, 0], mean 1/4, unbiased var
    (9/16 + 3/16) / 3 = 1/4, std 1/2 -> (1 - 1/4) / (1/2) + 1/4 = 1.75 and (0 - 1/4) / (1/2) + 1/4 = -0.25.
    Process 1: rewards 0.5 and 0.5: var 0, so the advantage is the mean added back: 0.5 each.
    """
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    counts = torch.tensor([1, 3, 2, 5])
    out = compute_advantages(rewards, 1, "reinforce_pp_maye", token_counts=counts, chunk_size=2)
    torch.testing.assert_close(out, torch.tensor([1.75, -0.25, 0.5, 0.5]), atol=1e-5, rtol=1e-5)
    # r1vision's default on the same batch: one value per completion over the global batch, mean 0:
    # mean 0.5, unbiased var (0.25 + 0.25) / 3 = 1/6
    ours = compute_advantages(rewards, 1, "reinforce_pp")
    s = math.sqrt(1 / 6 + 1e-8)
    torch.testing.assert_close(ours, torch.tensor([0.5 / s, -0.5 / s, 0.0, 0.0]))


def test_reinforce_pp_maye_equals_token_level_form_with_mean_kept() -> None:
    scores = torch.tensor([1.0, 0.0, 0.3])
    mask = torch.tensor([[True, False, False], [True, True, True], [True, True, False]])
    tokens = reinforce_pp_token_advantages(scores, mask, keep_mean=True)
    seq = compute_advantages(scores, 1, "reinforce_pp_maye", token_counts=mask.sum(1))
    torch.testing.assert_close(tokens, seq.unsqueeze(1).expand_as(tokens) * mask, atol=1e-5, rtol=1e-5)
    # without keep_mean the token form is zero-mean over the tokens (r1vision's convention)
    plain = reinforce_pp_token_advantages(scores, mask)
    assert abs(plain[mask].mean().item()) < 1e-6 and abs(tokens[mask].mean().item()) > 0.1


def test_masked_whiten_keep_mean_is_unambiguous() -> None:
    x = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(masked_whiten(x), torch.tensor([-1.0, 0.0, 1.0]))
    torch.testing.assert_close(masked_whiten(x, keep_mean=True), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError):
        masked_whiten(x, shift_mean=True)  # the ambiguous name is gone


# ------------------------------------------------------------------ estimator semantics vs TRL
@pytest.mark.parametrize("estimator", ["grpo", "reinforce_pp", "reinforce_pp_maye", "rloo"])
def test_unscorable_completions_get_zero_advantage_and_no_weight(estimator: str) -> None:
    rewards = torch.tensor([1.0, float("nan"), 0.0, 1.0, 0.0, 0.0])
    counts = torch.tensor([2, 2, 2, 2, 2, 2])
    out = compute_advantages(rewards, 3, estimator, token_counts=counts)
    assert out[1].item() == 0.0 and torch.isfinite(out).all()
    # the same as if the unscorable completion were absent from every statistic
    masked = compute_advantages(
        torch.nan_to_num(rewards), 3, estimator, token_counts=counts, mask=~torch.isnan(rewards)
    )
    torch.testing.assert_close(out, masked)
    if estimator == "rloo":  # baseline of completion 0 is the one other scorable sibling: 1 - 0
        assert out[0].item() == pytest.approx(1.0)
    if estimator == "reinforce_pp":  # 5 scorable values 1, 0, 1, 0, 0: mean 0.4
        assert out[0].item() == pytest.approx(0.6 / math.sqrt(0.3), rel=1e-5)


def test_scale_rewards_honoured_or_refused() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, 5.0, 7.0])
    plain = compute_advantages(rewards, 3, "rloo")
    grouped = compute_advantages(rewards, 3, "rloo", scale_rewards="group")
    stds = rewards.view(2, 3).std(dim=1).repeat_interleave(3)
    torch.testing.assert_close(grouped, plain / (stds + 1e-4))
    centered = compute_advantages(rewards, 3, "reinforce_pp", scale_rewards="none")
    torch.testing.assert_close(centered, rewards - rewards.mean())
    with pytest.raises(ValueError, match="cannot be honoured by advantage_estimator='reinforce_pp'"):
        compute_advantages(rewards, 3, "reinforce_pp", scale_rewards="group")
    with pytest.raises(ValueError, match="reinforce_pp_maye"):
        resolve_estimator_options("reinforce_pp_maye", "none")
    with pytest.raises(ValueError, match="multi_objective_aggregation='normalize_then_sum'"):
        resolve_estimator_options("rloo", None, "normalize_then_sum")
    assert resolve_estimator_options("grpo", None, "normalize_then_sum") == "group"
    assert resolve_estimator_options("reinforce_pp", None) == "batch"


def test_config_refuses_what_the_estimator_would_ignore(tmp_path) -> None:
    from r1vision.trainer.config import VisionGRPOConfig

    def make(**kw):
        return VisionGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **kw)

    with pytest.raises(ValueError, match="scale_rewards='group' cannot be honoured"):
        make(advantage_estimator="reinforce_pp", scale_rewards="group", num_generations=2)
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        make(advantage_estimator="rloo", multi_objective_aggregation="normalize_then_sum", num_generations=2)
    assert make(num_generations=2).scale_rewards == "group"  # TRL's default for grpo
    assert make(advantage_estimator="rloo", num_generations=2).scale_rewards == "none"
    assert make(advantage_estimator="reinforce_pp_maye", num_generations=1).num_generations == 1


def test_group_filtering_has_one_definition() -> None:
    from r1vision.tasks.group_filter import select_groups_by_std
    from r1vision.tasks.sgg import rewards as sgg_rewards

    assert sgg_rewards.select_groups_by_std is select_groups_by_std
    # 0.3 of 4 groups rounds *up* to 2 (the trainer used round() -> 1, the SGG helper ceil() -> 2)
    rewards = [0, 0, 0, 1, 0.5, 0.5, 0, 0.2]
    assert select_groups_by_std(rewards, 2, 0.3) == [2, 3, 6, 7]
    assert select_groups_by_std(rewards, 2, 1.0) == list(range(8))  # the fraction 1.0 keeps all, not 1 group
    # an unscorable (NaN) reward is left out of its group's std instead of making it NaN
    assert select_groups_by_std([float("nan"), 1.0, 0.0, 1.0], 2, 1) == [2, 3]
