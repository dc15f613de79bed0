"""One compact, numeric log line per step and a warning when a step carried no learning signal."""

from __future__ import annotations

import logging

import pytest

from r1vision.trainer.logline import format_logs, zero_signal_warning
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


def test_format_of_a_grpo_log():
    logs = {"loss": "0.0123", "grad_norm": 1.5, "learning_rate": 1e-5, "reward": 0.5312, "reward_std": 0.21,
            "rewards/accuracy/mean": 0.4, "rewards/format/mean": 0.9, "completions/mean_length": 123.4,
            "kl": 0.0021, "step_time": 1.523, "frac_reward_zero_std": 0.25}  # fmt: skip
    line = format_logs(logs, 12, 100)
    assert line == (
        "step 12/100 | reward 0.531 ± 0.210 (accuracy 0.400, format 0.900) | len 123 | loss 0.012 | kl 0.002 "
        "| grad 1.5 | lr 1.00e-05 | 1.52 s/step"
    )
    evaluation = {"eval_reward": "0.5069", "eval_prompt_brightness": 0.5069, "eval_num_images": "4.0",
                  "eval_runtime": 0.2, "epoch": 0.5}  # fmt: skip
    assert (
        format_logs(evaluation, 3, 10)
        == "eval at step 3 | reward 0.507 | prompt_brightness 0.507 | num_images 4"
    )
    summary = {"train_runtime": "4.367", "train_samples_per_second": "1.832", "train_steps_per_second": "0.458",
               "train_loss": "0.0123", "epoch": 1.0}  # fmt: skip
    assert format_logs(summary, 2, 2) == "trained 2 steps in 4.4 s (0.458 steps/s), mean loss 0.012"
    assert format_logs({"epoch": 1.0}, 2, 2) is None  # anything else keeps transformers' form
    assert zero_signal_warning(logs, 12) is None
    assert "no learning signal" in zero_signal_warning({"frac_reward_zero_std": 1.0}, 7)


@pytest.mark.slow
def test_training_prints_compact_lines_and_warns_once(tiny_model, color_dir, tmp_path, capsys, caplog):
    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir).remove_columns(["completion"])

    def constant(prompts, completions, **kwargs):
        return [1.0] * len(completions)

    args = grpo_args(tmp_path, max_steps=2, disable_tqdm=True)
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [constant, varied_reward], args=args, train_dataset=rows
    )
    with caplog.at_level(logging.WARNING, logger="r1vision.trainer.logline"):
        trainer.train()
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("step ")]
    assert [x.split(" |")[0] for x in lines] == ["step 1/2", "step 2/2"]
    assert "{'loss'" not in out and "(constant " in lines[0]
    assert "{'train_runtime'" not in out and "trained 2 steps in " in out  # the summary is a line too
    # one constant reward among two: the groups still differ through varied_reward, so no warning
    assert "no learning signal" not in caplog.text
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [constant], args=grpo_args(tmp_path / "b", max_steps=2),
                                train_dataset=rows)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="r1vision.trainer.logline"):
        trainer.train()
    assert caplog.text.count("no learning signal") == 1  # said once, not every step
