"""Advantage estimators and the k3 KL estimate, as pure torch functions.

Rewards arrive as one scalar per completion, ordered as TRL orders them: the ``num_generations``
completions of a prompt are consecutive, and the processes' local batches follow one another. A NaN
reward marks an *unscorable* completion (every reward function returned ``None``): as in TRL's GRPO, it
takes no part in any baseline or statistic and gets advantage 0. Estimators:

- ``grpo``: TRL's group-relative advantage ``r - mean_group(r)``, divided by the group std
  (``scale_rewards="group"``, default), the batch std (``"batch"``) or nothing (``"none"``).
- ``reinforce_pp`` (r1vision's Reinforce++): ``(r - mean(r)) / sqrt(var(r) + eps)`` over the whole *global*
  batch, one value per completion (masked mean, unbiased variance), so one completion per prompt works.
  The result has mean 0. ``scale_rewards="none"`` only subtracts the mean.
- ``reinforce_pp_maye`` (MAYE's exact form): every response token carries its completion's return
  (gamma 1, no KL reward: MAYE's published ``kl_reward_coeff`` is 0), the returns are whitened over all
  valid tokens of *each process's* batch (MAYE whitens per GPU, no all-reduce) and the mean is **added
  back** (torchtune's ``whiten(shift_mean=True)``, which MAYE calls). So long completions weigh more in
  the statistics, the advantages do not average to 0, and a batch with one reward value for all gets
  that value as advantage instead of 0. :func:`reinforce_pp_token_advantages` is the token-level form
  (with a per-token KL reward and a discount) for code that can use per-token advantages.
- ``rloo``: leave-one-out baseline ``r_i - mean_{j != i} r_j`` within each group; ``scale_rewards``
  ``"group"``/``"batch"`` divide by the group/batch std as GRPO does (default ``"none"``).
"""

from __future__ import annotations

import torch
from torch import Tensor

ESTIMATORS = ("grpo", "reinforce_pp", "reinforce_pp_maye", "rloo")
SCALE_MODES = ("group", "batch", "none")
# scale_rewards each estimator accepts; the first is its default. MAYE's form has exactly one.
_SCALES: dict[str, tuple[str, ...]] = {
    "grpo": ("group", "batch", "none"),
    "reinforce_pp": ("batch", "none"),
    "reinforce_pp_maye": ("batch",),
    "rloo": ("none", "group", "batch"),
}
_STD_EPS = 1e-4  # TRL's: advantages / (std + 1e-4)


def resolve_estimator_options(
    estimator: str, scale_rewards: str | bool | None, multi_objective_aggregation: str = "sum_then_normalize"
) -> str:
    """The ``scale_rewards`` an estimator will use (its default when ``None``); refuse what it cannot honour.

    Raises ``ValueError`` naming the option, so a config fails before training rather than being ignored.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    mode = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)  # type: ignore[arg-type]
    allowed = _SCALES[estimator]
    if mode is None:
        mode = allowed[0]
    if mode not in allowed:
        why = {
            "reinforce_pp": "it whitens over the whole batch (the groups play no part)",
            "reinforce_pp_maye": "MAYE's form always whitens over each process's tokens",
        }.get(estimator, f"choose one of {', '.join(SCALE_MODES)}")
        raise ValueError(
            f"scale_rewards={scale_rewards!r} cannot be honoured by advantage_estimator={estimator!r}: {why}; "
            f"allowed: {', '.join(allowed)} (or leave it unset)"
        )
    if estimator != "grpo" and multi_objective_aggregation != "sum_then_normalize":
        raise ValueError(
            f"multi_objective_aggregation={multi_objective_aggregation!r} is only implemented for "
            f"advantage_estimator='grpo' (TRL's); {estimator!r} works on the weighted sum of the rewards "
            "('sum_then_normalize')"
        )
    return mode


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
    values: Tensor, mask: Tensor | None = None, eps: float = 1e-8, keep_mean: bool = False
) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` (masked mean, unbiased masked variance); 0 where masked out.

    ``keep_mean=True`` adds the mean back after scaling, as MAYE does. The flag is not called
    ``shift_mean`` on purpose: TRL's old ``whiten(shift_mean=True)`` *removes* the mean while torchtune's
    (MAYE's) ``whiten(shift_mean=True)`` *adds it back* — one name, opposite meanings.
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if keep_mean:
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


def _group_stats(grouped: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group sum, count and unbiased std over the valid entries (std 0 with fewer than two)."""
    v = valid.to(grouped.dtype)
    count = v.sum(dim=1, keepdim=True)
    total = (grouped * v).sum(dim=1, keepdim=True)
    mean = total / count.clamp(min=1.0)
    sq = (((grouped - mean) * v) ** 2).sum(dim=1, keepdim=True)
    std = torch.where(count > 1, (sq / (count - 1).clamp(min=1.0)).sqrt(), torch.zeros_like(sq))
    return total, count, std


def _batch_std(rewards: Tensor, valid: Tensor) -> Tensor:
    return masked_var(rewards, valid).sqrt()


def grpo_advantages(
    rewards: Tensor, num_generations: int, scale_rewards: str | bool = "group", valid: Tensor | None = None
) -> Tensor:
    """TRL's GRPO advantages: group-mean baseline, scaled by group std, batch std or not at all."""
    grouped = _groups(rewards, num_generations)
    valid_g = torch.ones_like(grouped, dtype=torch.bool) if valid is None else valid.view_as(grouped)
    total, count, std = _group_stats(grouped, valid_g)
    advantages = (grouped - total / count.clamp(min=1.0)).reshape(-1)
    mode = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)  # type: ignore[arg-type]
    if mode == "group":
        scale = std.expand_as(grouped).reshape(-1)
    elif mode == "batch":
        flat_valid = valid_g.reshape(-1)
        scale = _batch_std(rewards, flat_valid).expand_as(rewards)
    elif mode == "none":
        return advantages
    else:
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    return advantages / (scale + _STD_EPS)


def reinforce_pp_advantages(
    rewards: Tensor, mask: Tensor | None = None, eps: float = 1e-8, scale_rewards: str = "batch"
) -> Tensor:
    """r1vision's Reinforce++: one value per completion, whitened over the whole batch (mean 0).

    ``mask`` (bool, same shape) excludes entries, e.g. unscorable completions or padding; they get 0.
    ``scale_rewards="none"`` subtracts the batch mean without dividing by the std.
    """
    rewards = rewards.to(torch.float32)
    if scale_rewards == "none":
        return (rewards - masked_mean(rewards, mask)) * (1.0 if mask is None else mask.to(rewards.dtype))
    return masked_whiten(rewards, mask, eps=eps)


def reinforce_pp_maye_advantages(
    rewards: Tensor,
    token_counts: Tensor,
    chunk_size: int | None = None,
    mask: Tensor | None = None,
    eps: float = 1e-8,
) -> Tensor:
    """MAYE's Reinforce++ advantages, one per completion (constant over its tokens).

    Equal to :func:`reinforce_pp_token_advantages` with ``keep_mean=True``, no KL reward and ``gamma=1``
    (MAYE's published setting), applied to each process's batch separately: every valid token carries its
    completion's reward, the token values of a chunk are whitened (mean and unbiased variance over the
    tokens) and the mean is added back.

    Args:
        rewards: ``(batch,)`` sequence rewards, processes' local batches one after another.
        token_counts: ``(batch,)`` number of valid response tokens of each completion.
        chunk_size: completions per process (MAYE: per GPU); ``None`` = one chunk.
        mask: completions that take part (others get 0 and no weight).
    """
    rewards = rewards.to(torch.float32)
    weights = token_counts.to(torch.float32).clamp(min=0.0)
    if mask is not None:
        weights = weights * mask.to(torch.float32)
    size = rewards.numel() if chunk_size is None else int(chunk_size)
    if size < 1 or rewards.numel() % size:
        raise ValueError(f"{rewards.numel()} rewards cannot be split into per-process chunks of {size}")
    out = torch.zeros_like(rewards)
    for start in range(0, rewards.numel(), size):
        r, w = rewards[start : start + size], weights[start : start + size]
        n = w.sum()
        if n <= 0:
            continue
        mean = (w * r).sum() / n
        var = torch.where(n > 1, (w * (r - mean) ** 2).sum() / (n - 1).clamp(min=1.0), torch.zeros_like(n))
        chunk = (r - mean) * torch.rsqrt(var + eps) + mean
        out[start : start + size] = torch.where(w > 0, chunk, torch.zeros_like(chunk))
    return out


def rloo_advantages(
    rewards: Tensor, num_generations: int, scale_rewards: str = "none", valid: Tensor | None = None
) -> Tensor:
    """RLOO: each completion's reward minus the mean reward of the other (scorable) completions of its prompt."""
    if num_generations < 2:
        raise ValueError("rloo needs num_generations >= 2 (the baseline leaves one completion out)")
    grouped = _groups(rewards, num_generations)
    valid_g = torch.ones_like(grouped, dtype=torch.bool) if valid is None else valid.view_as(grouped)
    total, count, std = _group_stats(grouped, valid_g)
    v = valid_g.to(grouped.dtype)
    others = count - v
    baseline = (total - grouped * v) / others.clamp(min=1.0)
    # a completion with no scorable sibling has no baseline: no learning signal
    advantages = torch.where(others > 0, grouped - baseline, torch.zeros_like(grouped)).reshape(-1)
    if scale_rewards == "group":
        return advantages / (std.expand_as(grouped).reshape(-1) + _STD_EPS)
    if scale_rewards == "batch":
        return advantages / (_batch_std(rewards, valid_g.reshape(-1)) + _STD_EPS)
    if scale_rewards != "none":
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    return advantages


def compute_advantages(
    rewards: Tensor,
    num_generations: int,
    estimator: str = "grpo",
    scale_rewards: str | bool | None = None,
    mask: Tensor | None = None,
    token_counts: Tensor | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Per-completion advantages from per-completion rewards with the named estimator.

    Args:
        rewards: shape ``(batch,)``; each prompt's ``num_generations`` completions are consecutive. NaN
            marks an unscorable completion: excluded from every statistic, advantage 0.
        num_generations: completions per prompt (``reinforce_pp`` and ``reinforce_pp_maye`` accept 1).
        estimator: one of :data:`ESTIMATORS`.
        scale_rewards: ``"group"``, ``"batch"``, ``"none"`` (or a bool); ``None`` = the estimator's default.
            See :func:`resolve_estimator_options` for what each estimator accepts.
        mask: entries that take part (bool); the others get advantage 0.
        token_counts: valid response tokens per completion (needed by ``reinforce_pp_maye``).
        chunk_size: completions per process, for ``reinforce_pp_maye``'s per-GPU statistics.
    """
    mode = resolve_estimator_options(estimator, scale_rewards)
    _groups(rewards, num_generations)  # same shape checks for all
    rewards = rewards.to(torch.float32)
    valid = ~torch.isnan(rewards)
    if mask is not None:
        valid = valid & mask.bool()
    clean = torch.where(valid, rewards, torch.zeros_like(rewards))
    if estimator == "grpo":
        advantages = grpo_advantages(clean, num_generations, mode, valid)
    elif estimator == "reinforce_pp":
        advantages = reinforce_pp_advantages(clean, valid, scale_rewards=mode)
    elif estimator == "reinforce_pp_maye":
        if token_counts is None:
            raise ValueError("reinforce_pp_maye needs token_counts (valid response tokens per completion)")
        advantages = reinforce_pp_maye_advantages(clean, token_counts, chunk_size, valid)
    else:
        advantages = rloo_advantages(clean, num_generations, mode, valid)
    return torch.where(valid, advantages, torch.zeros_like(advantages))


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
    keep_mean: bool = False,
) -> Tensor:
    """Token-level Reinforce++ (the shape of MAYE's ``estimate_advantages``): returns whitened over all valid tokens.

    The per-token reward is ``-kl_coef * kl`` with the sequence score added at the last valid token; the
    return is the discounted sum from each token to the end; advantages are the returns whitened with the
    masked mean and unbiased variance over every valid token of the batch. MAYE adds the mean back
    (``keep_mean=True``) and calls this once per GPU on that GPU's batch.

    Args:
        scores: ``(batch,)`` sequence rewards.
        response_mask: ``(batch, tokens)`` bool, true on response tokens (left-aligned, no holes).
        kl: ``(batch, tokens)`` per-token KL estimate (e.g. :func:`k3_kl` or ``logp - ref_logp``).
        kl_coef: weight of the KL reward.
        gamma: discount.
        keep_mean: add the mean back after whitening (MAYE's form).
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
    return masked_whiten(returns, mask, keep_mean=keep_mean)
