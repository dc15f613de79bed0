"""``r1vision_samples.jsonl``: one hash per optimizer step of the rows it trained on, independent of how the
global batch is split over processes (the 2-process comparison is in test_distributed.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from r1vision.trainer.sample_log import SAMPLES_FILE, SampleLogCallback, read_samples, rows_hash
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


def test_hash_is_order_free_and_tells_rows_apart():
    assert rows_hash([3, 1, 2, 2]) == rows_hash([2, 2, 1, 3])
    assert rows_hash([1, 2, 3]) != rows_hash([1, 2, 4]) and rows_hash([1, 2]) != rows_hash([1, 2, 2])


def test_a_resume_rewrites_the_steps_after_its_checkpoint(tmp_path):
    log = SampleLogCallback()
    args = SimpleNamespace(output_dir=str(tmp_path))
    for step in (1, 2, 3):
        log.record([step, step + 10])
        log.on_step_end(args, SimpleNamespace(global_step=step, is_world_process_zero=True), None)
    with open(tmp_path / SAMPLES_FILE, "a") as f:
        f.write('{"step": 4, "rows"')  # killed mid-line
    log.on_train_begin(args, SimpleNamespace(global_step=2, is_world_process_zero=True), None)
    assert read_samples(tmp_path) == {1: rows_hash([1, 11]), 2: rows_hash([2, 12])}


@pytest.mark.slow
def test_grpo_and_sft_log_every_step_with_the_global_batch(tiny_model, color_dir, tmp_path):
    from r1vision.trainer.config import VisionSFTConfig
    from r1vision.trainer.grpo import VisionGRPOTrainer
    from r1vision.trainer.sft import VisionSFTTrainer

    rows = task_rows("color", color_dir)
    model = tiny_model("qwen2_vl")
    grpo = VisionGRPOTrainer(model, [varied_reward], args=grpo_args(tmp_path / "g"),
                             train_dataset=rows.remove_columns(["completion"]))  # fmt: skip
    grpo.train()
    lines = [json.loads(x) for x in (tmp_path / "g" / SAMPLES_FILE).read_text().splitlines()]
    # 4 completions a step = one prompt repeated num_generations (4) times
    assert [x["step"] for x in lines] == [1, 2] and [x["rows"] for x in lines] == [4, 4]
    assert lines[0]["sha256"] != lines[1]["sha256"]

    args = VisionSFTConfig(output_dir=str(tmp_path / "s"), max_steps=2, per_device_train_batch_size=2,
                           gradient_accumulation_steps=2, use_cpu=True, report_to=[], save_strategy="no",
                           logging_steps=1, seed=0)  # fmt: skip
    VisionSFTTrainer(model, args=args, train_dataset=rows).train()
    lines = [json.loads(x) for x in (tmp_path / "s" / SAMPLES_FILE).read_text().splitlines()]
    assert [x["rows"] for x in lines] == [4, 4]  # two micro-batches of 2 per step
    assert len({x["sha256"] for x in lines}) == 2
