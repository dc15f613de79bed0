"""The generation-batch sampler (TRL's layout, Flow-GRPO's k-repeat groups) and the per-process seeds."""

from __future__ import annotations

from collections import Counter

import torch
from accelerate.data_loader import BatchSamplerShard
from torch.utils.data import BatchSampler

from r1vision.diffusion.sampler import GroupRepeatSampler, seeded


def _per_process(sampler: GroupRepeatSampler, batch: int, processes: int) -> list[list[list[int]]]:
    """What accelerate's sharded data loader gives each process at each micro-step."""
    inner = BatchSampler(sampler, batch, drop_last=False)
    return [list(BatchSamplerShard(inner, processes, rank)) for rank in range(processes)]


def test_each_generation_holds_whole_groups_and_repeats_for_its_micro_steps():
    # 2 processes x 3 images x 2 micro-steps = 12 images = 3 prompts x 4
    sampler = GroupRepeatSampler(
        num_rows=7, group_size=4, generation_images=12, repeats=2, seed=0, spread=True
    )
    ranks = _per_process(sampler, batch=6, processes=2)
    assert len(ranks[0]) == len(ranks[1]) == 4  # 2 generations (7 // 3 prompts) x 2 micro-steps
    for g in (0, 2):
        assert ranks[0][g] == ranks[0][g + 1] and ranks[1][g] == ranks[1][g + 1]  # one generation per 2 steps
        counts = Counter(ranks[0][g] + ranks[1][g])
        assert sorted(counts.values()) == [4, 4, 4]  # 3 prompts, each 4 times
    spread = sum(bool(set(ranks[0][g]) & set(ranks[1][g])) for g in (0, 2))
    assert spread >= 1  # with spread a group is shuffled over both processes
    assert len(list(sampler)) == len(sampler) == 2 * 12 * 2


def test_without_spread_groups_are_consecutive_and_epochs_reshuffle_deterministically():
    sampler = GroupRepeatSampler(
        num_rows=8, group_size=4, generation_images=8, repeats=1, seed=3, spread=False
    )
    order = list(sampler)
    assert all(len(set(order[i : i + 4])) == 1 for i in range(0, len(order), 4))
    sampler.set_epoch(1)
    other = list(sampler)
    sampler.set_epoch(0)
    assert list(sampler) == order and other != order  # the same epoch draws the same prompts on resume


def test_process_seeds_are_distinct_for_any_number_of_ranks():
    """(seed, generation, rank) -> one stream each: the old seed * 1_000_003 + step * 1009 + micro * 31 +
    rank formula collided (rank 31 of micro-step 0 drew rank 0's noise of micro-step 1) at 32 ranks."""
    draws = {
        float(torch.rand(1, generator=seeded(42, generation, rank, 1)))
        for generation in range(40)
        for rank in range(64)
    }
    assert len(draws) == 40 * 64
    assert float(torch.rand(1, generator=seeded(42, 3, 5, 1))) == float(
        torch.rand(1, generator=seeded(42, 3, 5, 1))
    )
