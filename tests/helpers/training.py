"""Small, fast trainer settings and a reward with spread, for the CPU tests that train."""

from __future__ import annotations

import os
from typing import Any


def varied_reward(prompts, completions, **kwargs):
    """A reward with spread across a group, so GRPO advantages (and gradients) are non-zero."""
    out = []
    for c in completions:
        text = c if isinstance(c, str) else c[-1]["content"]
        out.append(len(set(text)) / 10.0)
    return out


_ROUNDS_SCORED = 0


def flat_first_round_on_rank0(prompts, completions, **kwargs):
    """``varied_reward``, except that the first batch rank 0 scores is flat (one value): a rank with no
    learning signal while the other rank has its batch."""
    global _ROUNDS_SCORED
    _ROUNDS_SCORED += 1
    if os.environ.get("RANK", "0") == "0" and _ROUNDS_SCORED == 1:
        return [0.5] * len(completions)
    return varied_reward(prompts, completions)


def grpo_args(out_dir, **overrides: Any):
    """Small, fast GRPO settings for CPU tests."""
    from r1vision.trainer.config import VisionGRPOConfig

    base = dict(
        output_dir=str(out_dir),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        use_cpu=True,
        report_to=[],
        learning_rate=1e-2,
        save_strategy="no",
        max_pixels=56 * 56,
        seed=0,
        disable_tqdm=True,
    )
    base.update(overrides)
    return VisionGRPOConfig(**base)
