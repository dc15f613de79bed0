"""Group-relative advantages for text-to-image GRPO (Flow-GRPO's per-prompt stat tracker, in TRL's terms).

Samples are grouped by prompt *text* (a prompt drawn twice in a batch forms one bigger group, as Flow-GRPO's
``PerPromptStatTracker``); the advantage is ``(r - group mean) / (std + 1e-4)`` with the std of the group
(``scale_rewards="group"``), of the whole batch (``"batch"``: Flow-GRPO's ``global_std=True``, population
std as ``np.std``), or none (``"none"``: only centred). Advantages are clipped to ``+-adv_clip_max`` and
the samples whose advantage is exactly 0 (a group with one distinct reward) can be left out of the loss.
A NaN reward (no reward function scored the sample) gets advantage 0 and takes no part in any statistic.
The trainer calls this on the rewards gathered from every process (Flow-GRPO gathers before its tracker),
so a group may span processes and ``"batch"`` is the std of the whole step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

EPS = 1e-4  # Flow-GRPO's and TRL's epsilon


def group_advantages(
    prompts: Sequence[str], rewards: torch.Tensor, scale_rewards: str = "batch", adv_clip_max: float = 5.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages per sample and statistics (``zero_std_ratio``: share of groups whose rewards are all equal,
    ``group_size``, ``adv_zero_rate``, ``reward_std_mean``)."""
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards {scale_rewards!r}; choose group, batch or none")
    rewards = rewards.double()
    scored = ~torch.isnan(rewards)
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        if scored[i]:
            groups.setdefault(prompt, []).append(i)
    advantages = torch.zeros_like(rewards)
    batch_std = rewards[scored].std(unbiased=False) if scored.any() else torch.zeros((), dtype=rewards.dtype)
    zero_std, spreads = 0, []
    for rows in groups.values():
        r = rewards[rows]
        spread = r.std(unbiased=False)
        zero_std += int(spread.item() == 0)
        spreads.append(float(spread))
        if scale_rewards == "group":
            scale = spread + EPS
        elif scale_rewards == "batch":
            scale = batch_std + EPS
        else:
            scale = torch.ones((), dtype=rewards.dtype)
        advantages[rows] = (r - r.mean()) / scale
    advantages = advantages.clamp(-adv_clip_max, adv_clip_max)
    stats = {
        "zero_std_ratio": zero_std / max(len(groups), 1),
        "group_size": len(prompts) / max(len(groups), 1),
        "adv_zero_rate": float((advantages == 0).float().mean()),
        "reward_std_mean": sum(spreads) / max(len(spreads), 1),  # Flow-GRPO's mean within-group std
    }
    return advantages.float(), stats
