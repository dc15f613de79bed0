"""Advantage estimators and the k3 KL estimate, as pure torch functions.

Rewards arrive as one scalar per completion, ordered as TRL orders them: the ``num_generations``
completions of a prompt are consecutive. Estimators:

- ``grpo``: TRL's group-relative advantage ``r - mean_group(r)``, divided by the group std
  (``scale_rewards="group"``, default), the batch std (``"batch"``) or nothing (``"none"``).
- ``reinforce_pp``: Reinforce++ as in MAYE: ``(r - mean(r)) / sqrt(var(r) + eps)`` over the whole global
  batch (masked mean, unbiased variance), so one completion per prompt works.
  :func:`reinforce_pp_token_advantages` is the token-level form with a per-token KL reward.
- ``rloo``: leave-one-out baseline ``r_i - mean_{j != i} r_j`` within each group.
"""

from __future__ import annotations

import torch
from torch import Tensor

ESTIMATORS = ("grpo", "reinforce_pp", "rloo")


def masked_mean(values: Tensor, mask: Tensor | None = None, dim: int | None = None) -> Tensor:
    """Mean of ``values`` where ``mask`` is true (all of them when ``mask`` is None)."""
    if mask is None:
        return values.mean() if dim is None else values.mean(dim)
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_var(values: Tensor, mask: Tensor | None = None, unbiased: bool = True) -> Tensor:
    """Variance over the masked elements; ``unbiased`` divides by ``n - 1`` (0 when ``n < 2``)."""
    if mask is None:
        mask = torch.ones_like(values, dtype=torch.bool)
    mask_f = mask.to(values.dtype)
    n = mask_f.sum()
    mean = masked_mean(values, mask)
    sq = ((values - mean) ** 2 * mask_f).sum()
    if unbiased:
        return torch.where(n > 1, sq / (n - 1).clamp(min=1.0), torch.zeros_like(sq))
    return sq / n.clamp(min=1.0)


def masked_whiten(
    values: Tensor, mask: Tensor | None = None, eps: float = 1e-8, shift_mean: bool = True
) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` with masked mean and unbiased masked variance; 0 where masked out."""
    mean, var = masked_mean(values, mask), masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened if mask is None else whitened * mask.to(values.dtype)


def _groups(rewards: Tensor, num_generations: int) -> Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one per completion), got shape {tuple(rewards.shape)}")
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(
            f"{rewards.numel()} rewards cannot be split into groups of num_generations={num_generations}"
        )
    return rewards.view(-1, num_generations)


def grpo_advantages(rewards: Tensor, num_generations: int, scale_rewards: str | bool = "group") -> Tensor:
    """TRL's GRPO advantages: group-mean baseline, scaled by group std, batch std or not at all."""
    grouped = _groups(rewards, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)
    advantages = rewards - mean
    mode = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)  # type: ignore[arg-type]
    if mode == "group":
        std = (
            grouped.std(dim=1).repeat_interleave(num_generations)
            if num_generations > 1
            else torch.zeros_like(rewards)
        )
    elif mode == "batch":
        std = rewards.std().expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    elif mode == "none":
        return advantages
    else:
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    return advantages / (std + 1e-4)


def reinforce_pp_advantages(rewards: Tensor, mask: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """Reinforce++ (MAYE): rewards whitened over the whole batch, masked mean and unbiased variance.

    ``mask`` (bool, same shape) excludes entries, e.g. padding completions of an uneven last batch.
    """
    return masked_whiten(rewards.to(torch.float32), mask, eps=eps)


def rloo_advantages(rewards: Tensor, num_generations: int) -> Tensor:
    """RLOO: each completion's reward minus the mean reward of the other completions of its prompt."""
    if num_generations < 2:
        raise ValueError("rloo needs num_generations >= 2 (the baseline leaves one completion out)")
    grouped = _groups(rewards, num_generations)
    baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)
    return (grouped - baseline).reshape(-1)


def compute_advantages(
    rewards: Tensor,
    num_generations: int,
    estimator: str = "grpo",
    scale_rewards: str | bool = "group",
    mask: Tensor | None = None,
) -> Tensor:
    """Per-completion advantages from per-completion rewards with the named estimator.

    Args:
        rewards: shape ``(batch,)``; each prompt's ``num_generations`` completions are consecutive.
        num_generations: completions per prompt (``reinforce_pp`` accepts 1).
        estimator: ``"grpo"``, ``"reinforce_pp"`` or ``"rloo"``.
        scale_rewards: GRPO's std scaling: ``"group"`` (TRL default), ``"batch"``, ``"none"`` (or a bool).
        mask: for ``reinforce_pp``, which entries take part in the whitening statistics.
    """
    if estimator == "grpo":
        return grpo_advantages(rewards, num_generations, scale_rewards)
    if estimator == "reinforce_pp":
        _groups(rewards, num_generations)  # same shape checks as the others
        return reinforce_pp_advantages(rewards, mask)
    if estimator == "rloo":
        return rloo_advantages(rewards, num_generations)
    raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``.

    Non-negative and unbiased for samples drawn from the policy (Schulman, "Approximating KL divergence").
    """
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def reinforce_pp_token_advantages(
    scores: Tensor,
    response_mask: Tensor,
    kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
) -> Tensor:
    """Token-level Reinforce++ (MAYE's ``estimate_advantages``): returns whitened over all valid tokens.

    The per-token reward is ``-kl_coef * kl`` with the sequence score added at the last valid token; the
    return is the discounted sum from each token to the end; advantages are the returns whitened with the
    masked mean and unbiased variance over every valid token of the batch.

    Args:
        scores: ``(batch,)`` sequence rewards.
        response_mask: ``(batch, tokens)`` bool, true on response tokens (left-aligned, no holes).
        kl: ``(batch, tokens)`` per-token KL estimate (e.g. :func:`k3_kl` or ``logp - ref_logp``).
        kl_coef: weight of the KL reward.
        gamma: discount.
    """
    mask = response_mask.bool()
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=scores.device)
    if kl is not None and kl_coef:
        rewards = rewards - kl_coef * kl.to(torch.float32)
    lengths = mask.sum(dim=1)
    rows = torch.nonzero(lengths > 0).squeeze(1)
    rewards[rows, lengths[rows] - 1] += scores.to(torch.float32)[rows]
    rewards = rewards * mask
    returns = torch.zeros_like(rewards)
    running = torch.zeros(mask.shape[0], dtype=torch.float32, device=scores.device)
    for t in range(mask.shape[1] - 1, -1, -1):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
    return masked_whiten(returns, mask)
