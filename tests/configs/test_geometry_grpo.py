"""The geometry recipe against MAYE's published settings, and MAYE's LR schedule simulated."""

from __future__ import annotations

import math

from transformers import get_scheduler
from trl import TrlParser

from r1vision.runners.train import ScriptArguments
from r1vision.trainer.config import VisionGRPOConfig
from tests.helpers.paths import ROOT
from tests.helpers.tasks import run_context

RECIPE = ROOT / "configs" / "recipes" / "geometry_grpo.yaml"

# MAYE's launch script (scripts/train_ppo_vllm_distributed.sh): per GPU
MAYE = {"batch_size": 128, "ppo_batch_size": 4, "grad_accum": 2, "ppo_epochs": 1, "lr": 5e-6, "kl_loss": 1e-3}


def _parse(tmp_path) -> tuple[ScriptArguments, VisionGRPOConfig]:
    parser = TrlParser((ScriptArguments, VisionGRPOConfig))
    argv = ["--config", str(RECIPE), "--model", "m", "--dataset", "d", "--output_dir", str(tmp_path)]
    return parser.parse_args_and_config([*argv, "--use_cpu", "true"])


def _recipe(tmp_path) -> VisionGRPOConfig:
    return _parse(tmp_path)[1]


def test_recipe_rewards_are_maye_sum(tmp_path) -> None:
    from r1vision.tasks import get_task

    script, _ = _parse(tmp_path)
    task = get_task(script.task)
    specs = task.rewards(task.parse_options(script.task_options), run_context(eos=(2,)))
    # MAYE's score is accuracy + format - 0.1 x Chinese share; -0.1 (replacing it) without EOS
    assert {s.name: s.weight for s in specs} == {
        "accuracy": 1.0,
        "format": 1.0,
        "language": 0.1,
        "no_eos": 0.1,
    }
    assert task.parse_options(script.task_options).no_eos_replaces


def test_recipe_optimizer_is_mayes(tmp_path) -> None:
    c = _recipe(tmp_path)
    # torch's AdamW (fused or not: same update) with MAYE's hyper-parameters, not TRL's defaults
    assert getattr(c.optim, "value", c.optim).startswith("adamw_torch")
    assert (c.adam_beta1, c.adam_beta2, c.adam_epsilon, c.weight_decay) == (
        0.9,
        0.95,
        1e-5,
        0.01,
    )


def test_recipe_is_maye_per_gpu_batch_not_one_prompt_per_step(tmp_path) -> None:
    c = _recipe(tmp_path)
    rollouts_per_process = c.per_device_train_batch_size * c.steps_per_generation
    assert rollouts_per_process == MAYE["batch_size"] and c.num_generations == 1
    # one optimizer update = per_device x accumulation completions; updates per rollout as in MAYE
    assert c.per_device_train_batch_size * c.gradient_accumulation_steps == MAYE["ppo_batch_size"]
    assert c.gradient_accumulation_steps == MAYE["grad_accum"]
    assert rollouts_per_process // (c.per_device_train_batch_size * c.gradient_accumulation_steps) == 32
    assert c.learning_rate == MAYE["lr"] and c.beta == MAYE["kl_loss"] and c.num_iterations == 1
    assert c.advantage_estimator == "reinforce_pp_maye" and c.freeze_vision_tower
    # with 128 prompts of one response each, Reinforce++ is not GRPO: there are no groups to normalise in
    assert c.generation_batch_size // c.num_generations == 128


def _maye_lr_multipliers(rollouts: int) -> list[float]:
    """MAYE's schedule, simulated from its recipe: sized as rollouts x (batch / ppo_batch) x ppo_epochs
    optimizer steps, warm-up 0.1 x that (a float), stepped once per optimizer step; torchtune's cosine with
    warm-up (half a cycle)."""
    total = rollouts * (MAYE["batch_size"] // MAYE["ppo_batch_size"]) * MAYE["ppo_epochs"]
    warmup = 0.1 * total
    out = []
    for step in range(total):  # the recipe steps the scheduler after each optimizer.step()
        if step < warmup:
            out.append(step / max(1, warmup))
        else:
            progress = (step - warmup) / max(1, total - warmup)
            out.append(max(0.0, 0.5 * (1.0 + math.cos(math.pi * 2 * 0.5 * progress))))
    return out


def test_maye_cosine_decays_monotonically_and_the_recipe_follows_it(tmp_path) -> None:
    rollouts = 10
    maye = _maye_lr_multipliers(rollouts)
    peak = max(range(len(maye)), key=maye.__getitem__)
    after = maye[peak:]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))  # never wraps back up
    assert after[-1] < 0.001 and peak <= 0.1 * len(maye) + 1

    c = _recipe(tmp_path)
    steps = rollouts * 32  # the recipe's optimizer steps for the same rollouts
    import torch

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = get_scheduler(c.lr_scheduler_type, opt, c.get_warmup_steps(steps), steps)
    ours = []
    for _ in range(steps):
        ours.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # same curve; the only difference is the warm-up length rounded up to a whole step (32 vs 32.0 here)
    assert max(abs(a - b) for a, b in zip(ours, maye, strict=True)) < 0.02
