"""Dynamic sampling (DAPO; verl's ``filter_groups``, EasyR1's online filtering): a step trains only on prompt
groups whose rewards differ, drawing more prompts until it has a full batch of them or reaches a cap.

A group whose completions all got the same reward has zero advantage under a group baseline: it costs a
forward and backward and teaches nothing. ``keep_groups_by_std`` zeroes such groups; dynamic sampling replaces
them. The pieces here are pure (no trainer): which groups have spread, which extra prompts a round draws,
and how the rows picked from several generation rounds become one batch in TRL's layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

# Padding side per 2-D key: prompts are left-padded (generation reads them from the right), the rest right.
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
# Per-token over the prompt *and* the completion (TRL extends them with zeros for the completion): the
# prompt part is left-padded and the completion part right-padded, so image markers stay on their tokens.
_SPANNING = ("token_type_ids", "mm_token_type_ids")


def groups_with_spread(rewards: torch.Tensor, group: int) -> list[bool]:
    """Per group of ``group`` consecutive completions: whether its rewards differ (their std is not ~0, NaN
    rewards of unscorable completions left out), as TRL counts ``frac_reward_zero_std``."""
    grouped = rewards.reshape(-1, group).to(torch.float64)
    out = []
    for row in grouped:
        scored = row[~torch.isnan(row)]
        std = scored.std() if scored.numel() > 1 else torch.tensor(0.0, dtype=torch.float64)
        out.append(not bool(torch.isclose(std, torch.zeros_like(std))))
    return out


def reserve_indices(n_rows: int, count: int, seed: int, step: int, round_index: int) -> list[int]:
    """The dataset rows of one extra round: ``count`` prompts (the whole generation batch over all processes)
    drawn without replacement from ``(seed, step, round)`` alone, so every process draws the same list (each
    takes its slice) and a resumed run draws what the uninterrupted run drew."""
    generator = torch.Generator().manual_seed(
        ((int(seed) * 1_000_003 + int(step)) * 1_009 + int(round_index)) % 2**63
    )
    picks: list[int] = []
    while len(picks) < count:  # a generation batch larger than the dataset: several passes
        picks += torch.randperm(n_rows, generator=generator).tolist()
    return picks[:count]


def _pad_to(tensor: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    pad = torch.full(
        (tensor.shape[0], missing, *tensor.shape[2:]), value, dtype=tensor.dtype, device=tensor.device
    )
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


def merge_rounds(
    rounds: Sequence[dict[str, Any]], picks: Sequence[Sequence[int]], pad_token_id: int
) -> dict[str, Any]:
    """One batch of the rows ``picks[r]`` of each round ``rounds[r]``, in that order.

    ``rounds`` are TRL generation outputs with pixel values split per row (``split_pixel_values_by_grid``):
    every value is then per row (a tensor whose first dimension is the row, or a list) or a 0-d scalar.
    2-D per-token tensors of different widths are padded to the widest (prompts on the left with the pad
    token, the rest on the right with 0, masked out); scalars (``num_items_in_batch``) are left to the caller.
    """
    merged: dict[str, Any] = {}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        if any(v is None for v in values) or (isinstance(values[0], torch.Tensor) and values[0].ndim == 0):
            merged[key] = values[0]
            continue
        if isinstance(values[0], torch.Tensor):
            chosen = [v[list(p)] for v, p in zip(values, picks, strict=True)]
            if key in _SPANNING and values[0].ndim == 2:
                merged[key] = _merge_spanning(chosen, rounds)
                continue
            if values[0].ndim >= 2 and key not in ("image_grid_thw", "pixel_values"):
                width = max(c.shape[1] for c in chosen)
                left = key in _LEFT_PADDED
                fill = pad_token_id if key == "prompt_ids" else 0
                chosen = [_pad_to(c, width, fill, left) for c in chosen]
            merged[key] = torch.cat(chosen, dim=0)
        else:
            merged[key] = [v[i] for v, p in zip(values, picks, strict=True) for i in p]
    return merged


def _merge_spanning(chosen: list[torch.Tensor], rounds: Sequence[dict[str, Any]]) -> torch.Tensor:
    """Rows of a prompt-and-completion-wide tensor from several rounds: each round's part at its prompt's
    width is left-padded to the widest prompt, the rest right-padded to the widest completion (a tensor as
    wide as its round's prompt alone is left-padded as a whole)."""
    p_widths = [r["prompt_ids"].shape[1] for r in rounds]
    c_widths = [r["completion_ids"].shape[1] if "completion_ids" in r else 0 for r in rounds]
    prompt_w, completion_w = max(p_widths), max(c_widths)
    out = []
    for c, p_w in zip(chosen, p_widths, strict=True):
        head = _pad_to(c[:, :p_w], prompt_w, 0, left=True)
        tail = c[:, p_w:]
        out.append(
            torch.cat([head, _pad_to(tail, completion_w, 0, left=False)], dim=1) if tail.shape[1] else head
        )
    return torch.cat(out, dim=0)
