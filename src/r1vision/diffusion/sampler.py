"""Which prompts each process samples: groups of ``num_generations`` images per prompt over a whole generation
batch, in TRL's terms (one row = one image, as ``per_device_train_batch_size`` counts completions in TRL).

A *generation batch* is every image one rollout makes, on all processes:
``per_device_train_batch_size x num_processes x steps_per_generation`` images, i.e. ``that / num_generations``
prompts drawn without replacement from a per-epoch permutation. Each prompt's index is repeated
``num_generations`` times; with ``spread`` (Flow-GRPO's ``DistributedKRepeatSampler``) the copies are then
shuffled over the whole generation batch, so one group may span processes and micro-steps, else they stay
consecutive (TRL's ``RepeatSampler``). The generation batch is yielded ``steps_per_generation`` times: the
dataloader (batch size ``per_device_train_batch_size x steps_per_generation``, sharded by accelerate: batch
``k`` to process ``k % num_processes``) then gives every process its part of the generation batch at every
micro-step, and the trainer samples once per generation. Deterministic in ``(seed, epoch)``, so a resumed
run draws the same prompts.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


def seeded(*parts: int) -> torch.Generator:
    """A CPU generator seeded from several integers without collisions (``numpy.random.SeedSequence``):
    ``(seed, step, rank)`` tuples that sum alike still draw different numbers, for any number of ranks."""
    import numpy as np

    state = np.random.SeedSequence([int(p) % 2**63 for p in parts]).generate_state(2, dtype=np.uint64)
    return torch.Generator().manual_seed(int(state[0] ^ (state[1] >> 1)) % 2**63)


class GroupRepeatSampler(Sampler[int]):
    """Row indices for the generation batches of one epoch (see the module docstring)."""

    def __init__(
        self, num_rows: int, group_size: int, generation_images: int, repeats: int, seed: int, spread: bool
    ) -> None:
        if generation_images % group_size:
            raise ValueError(
                f"a generation batch of {generation_images} images does not split into groups of {group_size}"
            )
        self.num_rows, self.group_size, self.repeats = num_rows, group_size, repeats
        self.prompts = generation_images // group_size
        self.seed, self.spread, self.epoch = seed, spread, 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the trainer at each epoch (through accelerate's data loader)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = seeded(self.seed, self.epoch)
        order = torch.randperm(self.num_rows, generator=generator).tolist()
        for start in range(0, self.num_rows - self.prompts + 1, self.prompts):
            images = [i for i in order[start : start + self.prompts] for _ in range(self.group_size)]
            if self.spread:
                images = [images[j] for j in torch.randperm(len(images), generator=generator).tolist()]
            for _ in range(self.repeats):
                yield from images

    def __len__(self) -> int:
        return (self.num_rows // self.prompts) * self.prompts * self.group_size * self.repeats
