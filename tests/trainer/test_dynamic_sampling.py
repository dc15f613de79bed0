"""Dynamic sampling (DAPO): the pure pieces (spread per group, reserve draws, merging rounds) and
``VisionGRPOTrainer`` with it on the tiny VLM: every trained group has spread, extra rounds are counted, and a
batch that needs no extra round trains exactly as without the option. The 2-process run, with a rank whose
first round has no spread at all, is in ``tests/trainer/test_distributed.py``."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from r1vision.trainer.dynamic_sampling import groups_with_spread, merge_rounds, reserve_indices
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

NAN = math.nan


def test_groups_with_spread_ignores_unscorable_completions():
    rewards = torch.tensor([1, 1, 1, 1, 0, 1, 0, 0, NAN, NAN, 2, 2, NAN, 3, NAN, 1.0])
    assert groups_with_spread(rewards, 4) == [False, True, False, True]
    assert groups_with_spread(torch.tensor([0.5, 0.5 + 1e-9]), 2) == [False]  # as TRL's isclose


def test_reserve_draws_depend_on_seed_step_and_round_only():
    a = reserve_indices(10, 4, seed=0, step=3, round_index=1)
    assert a == reserve_indices(10, 4, seed=0, step=3, round_index=1)  # every process, and after resume
    assert len(set(a)) == 4 and all(0 <= i < 10 for i in a)
    others = {tuple(reserve_indices(10, 4, 0, 3, 2)), tuple(reserve_indices(10, 4, 0, 4, 1))}
    others.add(tuple(reserve_indices(10, 4, 1, 3, 1)))
    assert tuple(a) not in others
    wide = reserve_indices(3, 7, 0, 0, 1)  # a batch larger than the dataset: several passes
    assert len(wide) == 7 and set(wide) == {0, 1, 2}


def test_merge_rounds_pads_each_side_and_keeps_rows_whole():
    def round_(n: int, p_width: int, c_width: int, base: int) -> dict:
        return {
            "prompt_ids": torch.arange(n * p_width).reshape(n, p_width) + base,
            "prompt_mask": torch.ones(n, p_width, dtype=torch.long),
            "completion_ids": torch.arange(n * c_width).reshape(n, c_width) + base,
            "completion_mask": torch.ones(n, c_width, dtype=torch.long),
            "advantages": torch.arange(n, dtype=torch.float32) + base,
            "pixel_values": [torch.full((4, 3), float(base + i)) for i in range(n)],
            "image_grid_thw": [torch.tensor([[1, 2, 2]]) for _ in range(n)],
            "num_images": [1] * n,
            "num_items_in_batch": torch.tensor(99),
            # prompt + completion wide, as TRL returns it: 1 marks the prompt's image tokens (its last one)
            "mm_token_type_ids": torch.cat(
                [torch.zeros(n, p_width - 1), torch.ones(n, 1), torch.zeros(n, c_width)], dim=1
            ).long(),
        }

    merged = merge_rounds([round_(2, 3, 2, 0), round_(2, 5, 4, 100)], [[1], [0]], pad_token_id=-1)
    assert merged["prompt_ids"].tolist() == [[-1, -1, 3, 4, 5], [100, 101, 102, 103, 104]]
    assert merged["prompt_mask"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert merged["completion_ids"].tolist() == [[2, 3, 0, 0], [100, 101, 102, 103]]
    assert merged["completion_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert merged["advantages"].tolist() == [1.0, 100.0]
    assert [float(p[0, 0]) for p in merged["pixel_values"]] == [1.0, 100.0]
    assert merged["num_images"] == [1, 1] and len(merged["image_grid_thw"]) == 2
    # the image marker stays on the last prompt token of each row (it slid right when padded as a whole)
    assert merged["mm_token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0, 0, 0]]


def _half_flat(prompts, completions, row_index, **kwargs):
    """Flat (one value for the whole group) on even rows, spread on odd ones."""
    varied = varied_reward(prompts, completions)
    return [0.5 if i % 2 == 0 else v for i, v in zip(row_index, varied, strict=True)]


def _train(tmp_path, color_dir, tiny_model, reward, **overrides):
    from r1vision.trainer.grpo import VisionGRPOTrainer

    data = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(tmp_path, per_device_train_batch_size=8, max_steps=3, **overrides)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [reward], args=args, train_dataset=data)
    batches: list[dict] = []
    inner = trainer._generate_and_score_completions

    def spy(inputs):
        out = inner(inputs)
        if trainer.model.training:
            batches.append({k: v for k, v in out.items() if k in ("advantages", "completion_mask")})
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    with open(tmp_path / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("loss")]
    return batches, rows


def test_every_trained_group_has_spread_and_extra_rounds_are_counted(tmp_path, color_dir, tiny_model):
    batches, rows = _train(tmp_path, color_dir, tiny_model, _half_flat, dynamic_sampling=True)
    assert len(batches) == 3
    for batch in batches:
        assert batch["advantages"].shape == (8,)  # the batch keeps its size
        groups = batch["advantages"].reshape(-1, 4)
        assert (groups.abs().sum(dim=1) > 0).all(), groups  # no flat group trains
    rounds = [float(r["dynamic_sampling/rounds"]) for r in rows]
    assert all(1 <= n <= 10 for n in rounds) and max(rounds) > 1, rounds
    assert [float(r["dynamic_sampling/prompts_drawn"]) for r in rows] == [2 * n for n in rounds]
    assert all(float(r["dynamic_sampling/groups_with_spread"]) == 1.0 for r in rows)


def test_at_the_cap_the_batch_is_completed_with_flat_groups(tmp_path, color_dir, tiny_model):
    def flat(prompts, completions, **kwargs):
        return [1.0] * len(completions)

    batches, rows = _train(tmp_path, color_dir, tiny_model, flat, dynamic_sampling=True,
                           dynamic_sampling_max_rounds=2)  # fmt: skip
    assert all(b["advantages"].shape == (8,) and not b["advantages"].any() for b in batches)
    assert [float(r["dynamic_sampling/rounds"]) for r in rows] == [2.0, 2.0, 2.0]
    assert all(float(r["dynamic_sampling/groups_with_spread"]) == 0.0 for r in rows)


@pytest.mark.slow
def test_a_batch_that_needs_no_extra_round_trains_as_without_it(tmp_path, color_dir, tiny_model):
    _, plain = _train(tmp_path / "plain", color_dir, tiny_model, varied_reward)
    _, dyn = _train(tmp_path / "dyn", color_dir, tiny_model, varied_reward, dynamic_sampling=True)
    assert [float(r["dynamic_sampling/rounds"]) for r in dyn] == [1.0, 1.0, 1.0]
    for a, b in zip(plain, dyn, strict=True):
        assert float(a["loss"]) == pytest.approx(float(b["loss"]), abs=1e-7)
        assert float(a["grad_norm"]) == pytest.approx(float(b["grad_norm"]), rel=1e-5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(dynamic_sampling_max_rounds=0), "dynamic_sampling_max_rounds must be >= 1"),
        (dict(keep_groups_by_std=0.5), "choose one"),
        (dict(advantage_estimator="reinforce_pp"), "group baseline"),
    ],
)
def test_settings_that_cannot_work_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        grpo_args(tmp_path, dynamic_sampling=True, **overrides)


def test_groups_must_stay_whole_on_each_process():
    """2 processes x 2 completions with groups of 4 (valid for TRL: 4 per generation batch) would split each
    group over the processes; dynamic sampling picks groups per process, so it refuses that layout."""
    from types import SimpleNamespace

    from r1vision.trainer.grpo import _check_dynamic_sampling

    args = SimpleNamespace(per_device_train_batch_size=2, steps_per_generation=1)
    with pytest.raises(ValueError, match="2 must be a multiple of num_generations = 4"):
        _check_dynamic_sampling(args, 4, [1, 2, 3])
    _check_dynamic_sampling(SimpleNamespace(per_device_train_batch_size=2, steps_per_generation=2), 4, [1])
    with pytest.raises(ValueError, match="map-style"):
        _check_dynamic_sampling(
            SimpleNamespace(per_device_train_batch_size=4, steps_per_generation=1), 4, iter([])
        )
