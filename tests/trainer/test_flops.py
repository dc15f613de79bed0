"""Counted FLOPs (r1vision.trainer.flops) and the demo's FLOP-matched SFT arm.

The reference is an op-level count: torch's FlopCounterMode sees every aten matmul, convolution and
attention kernel that runs, forward and backward. Two kernels this CPU stack runs are missing from its
table (the CPU flash-attention pair and in-place ``addmm_``, which TRL's fused LM head uses in its
backward), so the reference adds them. The hook counter must agree with it exactly.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from r1vision.demo.arms import FlopBudget, StageResult, matched_steps
from r1vision.trainer.flops import FlopCounter, FlopCounterCallback, format_flops
from tests.helpers.images import tiny_vlm_batch
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

aten = torch.ops.aten


def _addmm_(acc, a, b, *args, out_shape=None, **kwargs) -> int:
    return 2 * a[0] * a[1] * b[1]


def _cpu_sdpa(q, k, v, *args, out_shape=None, **kwargs) -> int:
    return 4 * math.prod(q) * k[-2]  # scores and weighted values over the full T x T_k matrix


def _cpu_sdpa_backward(grad, q, k, v, *args, out_shape=None, **kwargs) -> int:
    return 2 * _cpu_sdpa(q, k, v)


def _sft_args(out, steps: int, batch: int = 4, **kw):
    from r1vision.trainer.config import VisionSFTConfig

    return VisionSFTConfig(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch, use_cpu=True, report_to=[],
        save_strategy="no", max_pixels=56 * 56, disable_tqdm=True, bf16=False, seed=0,
        gradient_checkpointing=False, **kw,  # its recomputation is not model FLOPs (see flops.py)
    )  # fmt: skip


def reference() -> FlopCounterMode:
    return FlopCounterMode(
        display=False,
        custom_mapping={
            aten.addmm_: _addmm_,
            aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward,
        },
    )


@pytest.fixture(scope="module")
def vlm(tiny_model):
    return tiny_vlm_batch(tiny_model("qwen2_vl"))


def test_counter_equals_op_level_count_for_generation_and_training(vlm):
    from trl.trainer.utils import add_fused_lm_head

    model, batch = vlm
    b, prompt = batch["input_ids"].shape
    model.eval()
    with FlopCounter(model) as ours, reference() as ref, torch.no_grad():
        out = model.generate(**batch, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out.shape[1] == prompt + 5
    # KV-cached generation: the prompt once, then one position per sequence per decode step.
    assert ours.positions == b * prompt + b * 4
    assert ours.total == ref.get_total_flops() > 0
    assert min(ours.counts.values()) > 0

    model.train()
    labels = batch["input_ids"].clone()
    for fused in (False, True):
        if fused:
            add_fused_lm_head(model)  # what TRL's SFT and GRPO losses call: bypasses lm_head's forward
        with FlopCounter(model) as ours, reference() as ref:
            model(**batch, labels=labels, fused_lm_head=fused).loss.backward()
        assert ours.total == ref.get_total_flops(), f"fused={fused}"
        weights = sum(
            m.weight.numel() for m in model.get_decoder().modules() if isinstance(m, torch.nn.Linear)
        )
        assert ours.counts["text"] == 3 * 2 * weights * b * prompt  # forward + backward = 3 forwards
    model.zero_grad()


@pytest.mark.slow
def test_sft_and_grpo_steps_count_what_ran(tiny_model, color_dir, tmp_path):
    """Whole trainer steps: the counter sees every forward TRL runs (generation included)."""
    from r1vision.trainer.grpo import VisionGRPOTrainer
    from r1vision.trainer.sft import VisionSFTTrainer

    rows = task_rows("color", color_dir)
    counter = FlopCounter()
    sft = VisionSFTTrainer(tiny_model("qwen2_vl"), args=_sft_args(tmp_path / "sft", 1), train_dataset=rows,
                           callbacks=[FlopCounterCallback(counter)])  # fmt: skip
    with reference() as ref:
        sft.train()
    assert counter.total == ref.get_total_flops() > 0
    weights = sum(
        m.weight.numel() for m in sft.model.get_decoder().modules() if isinstance(m, torch.nn.Linear)
    )
    assert counter.counts["text"] == 3 * 2 * weights * counter.positions
    assert counter._handles == []  # detached at train end: later forwards are not counted

    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], train_dataset=rows.remove_columns(["completion"]),
        args=grpo_args(tmp_path / "grpo", max_steps=1, gradient_checkpointing=False),
    )  # fmt: skip
    shapes = {}
    generate = trainer._generate_and_score_completions

    def spy(inputs):
        out = generate(inputs)
        shapes["prompt"], shapes["completion"] = out["prompt_ids"].shape, out["completion_ids"].shape
        return out

    trainer._generate_and_score_completions = spy
    counter = FlopCounter()
    trainer.add_callback(FlopCounterCallback(counter, extra_models=[trainer.ref_model]))
    with reference() as ref:
        trainer.train()
    assert counter.total == ref.get_total_flops() > 0
    (b, p), (_, c) = shapes["prompt"], shapes["completion"]
    # Prefill, c - 1 decode steps, then one training forward over prompt + completion (no old-logprob
    # forward with num_iterations 1, no reference forward with beta 0).
    assert counter.positions == b * p + b * (c - 1) + b * (p + c)
    weights = sum(
        m.weight.numel() for m in trainer.model.get_decoder().modules() if isinstance(m, torch.nn.Linear)
    )
    assert counter.counts["text"] == 2 * weights * (b * p + b * (c - 1) + 3 * b * (p + c))


def test_flop_budget_stops_nearest_the_target_with_linear_lr():
    counter = SimpleNamespace(total=0.0)
    budget = FlopBudget(100.0, base_lr=1.0, counter=counter)
    control = SimpleNamespace(should_training_stop=False)
    opt = SimpleNamespace(param_groups=[{"lr": 0.0}])
    lrs = []
    while not control.should_training_stop:
        budget.on_step_begin(None, None, control, optimizer=opt)
        lrs.append(opt.param_groups[0]["lr"])
        counter.total += 30.0  # one step's FLOPs
        budget.on_step_end(None, None, control)
    # 90 is 10 short of 100, 120 would be 20 over: stop at 3 steps; the rate fell linearly in FLOPs.
    assert counter.total == 90.0 and lrs == pytest.approx([1.0, 0.7, 0.4])
    with pytest.raises(ValueError, match="positive"):
        FlopBudget(0.0, 1.0, counter)
    sft = StageResult("sft", "x", seconds=300.0, steps=400, cpu_seconds=100.0, flops=4e12)
    assert matched_steps(5e11, sft) == 50 and matched_steps(1.0, sft) == 1
    assert format_flops(2.5e13) == "25 TFLOP"


@pytest.mark.slow
def test_matched_arm_does_not_depend_on_clocks(tiny_model, color_dir, tmp_path, monkeypatch):
    """Same budget, clocks running 1000x fast (a loaded machine): the same steps and FLOPs."""
    from r1vision.trainer.sft import VisionSFTTrainer

    rows = task_rows("color", color_dir)

    def run(name):
        probe = FlopCounter()  # one step's FLOPs, to set a budget of ~2.4 steps
        one = VisionSFTTrainer(tiny_model("qwen2_vl"), args=_sft_args(tmp_path / f"{name}_probe", 1, batch=2),
                               train_dataset=rows, callbacks=[FlopCounterCallback(probe)])  # fmt: skip
        one.train()
        counter = FlopCounter()
        callbacks = [FlopCounterCallback(counter), FlopBudget(2.4 * probe.total, 1e-3, counter)]
        args = _sft_args(tmp_path / name, 6, batch=2, learning_rate=1e-3, lr_scheduler_type="constant")
        trainer = VisionSFTTrainer(tiny_model("qwen2_vl"), args=args, train_dataset=rows, callbacks=callbacks)
        trainer.train()
        return trainer.state.global_step, counter.total, probe.total

    steps, flops, per_step = run("idle")
    start = time.perf_counter()
    for clock in ("perf_counter", "process_time", "time"):
        real = getattr(time, clock)
        monkeypatch.setattr(time, clock, lambda real=real: start + 1000 * (real() - start))
    slow = run("loaded")
    monkeypatch.undo()
    assert slow[:2] == (steps, flops)
    assert 1 < steps < 6  # the budget stopped it, not max_steps
    assert abs(flops - 2.4 * per_step) <= per_step
