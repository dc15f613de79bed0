"""Resuming a killed run gives the same next steps as an uninterrupted one, without duplicate CSV rows."""

import csv
import json
import logging
import shutil

import pytest
from transformers import TrainerCallback

from r1vision.trainer.grpo import VisionGRPOTrainer
from r1vision.trainer.metrics_csv import MetricsCSVCallback
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


class StopAfter(TrainerCallback):
    """Simulates a kill right after the checkpoint at ``step``."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _train(tiny_model, color_dir, out, callbacks=(), resume=None, **overrides):
    ds = task_rows("color", color_dir).remove_columns(["completion"])
    settings = dict(max_steps=4, save_strategy="steps", save_steps=2, learning_rate=5e-3) | overrides
    args = grpo_args(out, **settings)
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=ds, callbacks=list(callbacks)
    )
    trainer.train(resume_from_checkpoint=resume)
    return _rows(out / "metrics.csv")


@pytest.mark.slow
def test_kill_and_resume_matches_uninterrupted(tiny_model, color_dir, tmp_path, caplog):
    full = _train(tiny_model, color_dir, tmp_path / "full")
    _train(tiny_model, color_dir, tmp_path / "killed", callbacks=[StopAfter(2)])
    assert [r["step"] for r in _rows(tmp_path / "killed" / "metrics.csv")] == ["1", "2"]
    # a kill during the next save leaves a newer, torn folder: weights half written, no trainer state
    torn = tmp_path / "killed" / "checkpoint-3"
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"\0" * 100)
    with caplog.at_level(logging.WARNING, logger="r1vision.trainer.checkpoint"):
        resumed = _train(tiny_model, color_dir, tmp_path / "killed", resume="last")
    assert "resuming from " + str(tmp_path / "killed" / "checkpoint-2") in caplog.text
    assert "skipped checkpoint-3: no trainer_state.json" in caplog.text

    assert [r["step"] for r in resumed] == ["1", "2", "3", "4"], "metrics.csv must have one row per step"
    by_step = {r["step"]: r for r in full}
    for row in resumed[2:]:
        ref = by_step[row["step"]]
        for key in ("loss", "reward", "grad_norm"):
            assert float(row[key]) == pytest.approx(float(ref[key]), rel=1e-4, abs=1e-6), (row["step"], key)


@pytest.mark.slow
def test_a_checkpoint_inside_a_generation_resumes_from_its_samples(tiny_model, color_dir, tmp_path, caplog):
    """One generation feeds 2 optimizer steps and the checkpoint after the first keeps it: the resumed run
    trains the second from the same samples, and the next generation starts where the uninterrupted run's
    does (TRL kept neither: it generated again at once and counted its micro-steps from 0)."""
    within = dict(steps_per_generation=2, save_steps=1)
    full = _train(tiny_model, color_dir, tmp_path / "full", **within)
    _train(tiny_model, color_dir, tmp_path / "killed", callbacks=[StopAfter(1)], **within)
    assert (tmp_path / "killed" / "checkpoint-1" / "rollout_buffer_rank0.pt").is_file()
    assert not (tmp_path / "full" / "checkpoint-2" / "rollout_buffer_rank0.pt").exists()  # a boundary
    resumed = _train(tiny_model, color_dir, tmp_path / "killed", resume="last", **within)
    assert [r["step"] for r in resumed] == ["1", "2", "3", "4"]
    # TRL logs the rewards on the steps that generate (1 and 3): step 2 must not be one of them
    assert (
        [bool(r["reward"]) for r in resumed]
        == [bool(r["reward"]) for r in full]
        == [True, False, True, False]
    )
    for row, ref in zip(resumed[1:], full[1:], strict=True):
        for key in ("loss", "grad_norm", *(("reward",) if ref["reward"] else ())):
            assert float(row[key]) == pytest.approx(float(ref[key]), rel=1e-4, abs=1e-6), (row["step"], key)
    # With ignore_data_skip the data loader restarts its epoch, but Trainer still calls _load_rng_state (where
    # the samples are restored) on resume: step 2 trains the saved samples, as uninterrupted.
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "killed" / "checkpoint-1", again / "checkpoint-1")
    rows = _train(
        tiny_model, color_dir, again, resume=str(again / "checkpoint-1"), ignore_data_skip=True, **within
    )
    assert [(r["step"], bool(r["reward"])) for r in rows] == [("2", False), ("3", True), ("4", False)]
    for key in ("loss", "grad_norm"):
        assert float(rows[0][key]) == pytest.approx(float(full[1][key]), rel=1e-4, abs=1e-6), key


def test_csv_columns_grow_and_steps_merge(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    cb = MetricsCSVCallback(tmp_path / "m.csv")
    state = TrainerState()
    state.is_world_process_zero = True
    args, control = TrainingArguments(output_dir=str(tmp_path), report_to=[]), TrainerControl()
    cb.on_train_begin(args, state, control)
    state.global_step, state.epoch = 1, 0.5
    cb.on_log(args, state, control, logs={"loss": 1.0})
    state.global_step = 2
    cb.on_log(args, state, control, logs={"loss": 0.5, "reward": 0.25})
    cb.on_log(args, state, control, logs={"eval_reward": 0.75, "note": "text is skipped"})
    rows = _rows(tmp_path / "m.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert rows[0]["reward"] == "" and rows[1]["reward"] == "0.25" and rows[1]["eval_reward"] == "0.75"
    assert "note" not in rows[0]


def test_last_checkpoint_is_the_newest_complete_one(tmp_path):
    from r1vision.checkpoints import checkpoint_problem
    from r1vision.trainer.checkpoint import NoCheckpointError, resolve_last_checkpoint

    def checkpoint(step, state=True, weights=True):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if weights:
            (folder / "model.safetensors").write_bytes(b"w")
        if state is True:
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        elif state:
            (folder / "trainer_state.json").write_text(state)
        return str(folder)

    with pytest.raises(NoCheckpointError, match="no checkpoint-\\* folder"):
        resolve_last_checkpoint(str(tmp_path))
    checkpoint(9)
    ten = checkpoint(10)  # numeric order: 10 is newer than 9
    checkpoint(11, state='{"global_st')  # torn JSON
    checkpoint(12, weights=False)
    checkpoint(13, state=False)
    assert resolve_last_checkpoint(str(tmp_path)) == ten
    assert "not readable JSON" in checkpoint_problem(str(tmp_path / "checkpoint-11"))
    assert checkpoint_problem(str(tmp_path / "checkpoint-12")) == "no model weights"
    deepspeed = tmp_path / "ds"
    (deepspeed / "global_step4").mkdir(parents=True)
    (deepspeed / "latest").write_text("global_step4")
    (deepspeed / "trainer_state.json").write_text('{"global_step": 4}')
    assert checkpoint_problem(str(deepspeed)) is None


def test_a_full_disk_during_a_save_is_named_as_such(tmp_path, monkeypatch):
    """torch reports a full disk as "unexpected pos" / "iostream error"; the save names it, with the folder
    and the space left, and the half-written checkpoint stays incomplete (resume skips it)."""
    import shutil
    from collections import namedtuple

    import pytest

    from r1vision.checkpoints import DiskFullError, checkpoint_problem, disk_errors_named

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10, 10, 3 * 2**20))
    folder = tmp_path / "checkpoint-7"
    folder.mkdir()
    with pytest.raises(DiskFullError, match=r"No space left on device while saving a checkpoint in .*checkpoint-7 "
                       r"\(3 MiB free\)"):  # fmt: skip
        with disk_errors_named(folder, "a checkpoint"):
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 3200 vs 3112")
    assert checkpoint_problem(str(folder)) == "no trainer_state.json (a save was interrupted)"
    with pytest.raises(ValueError, match="not about disks"):  # other errors pass through unchanged
        with disk_errors_named(folder, "a checkpoint"):
            raise ValueError("not about disks")


def test_the_zero3_universal_mend_gives_each_group_its_step_and_hyperparameters(tmp_path):
    """DeepSpeed's ZeRO-3 universal load hands every sub-group one shared ``step`` tensor and group 0's
    hyperparameters (its slip, reproduced here on a torch AdamW); the mend restores one step per state and
    each group's saved settings, so the next step matches an optimizer that never went through the load."""
    import torch

    from r1vision.trainer.checkpoint import mend_zero3_universal_load

    def adamw() -> tuple[torch.optim.AdamW, list[torch.Tensor]]:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(8)), torch.nn.Parameter(torch.randn(4))]
        groups = [{"params": [params[0]], "weight_decay": 0.1}, {"params": [params[1]], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-2)
        for _ in range(2):
            opt.zero_grad()
            sum((p * p).sum() for p in params).backward()
            opt.step()
        return opt, params

    want_opt, want = adamw()
    got_opt, got = adamw()
    saved = [{k: v for k, v in g.items() if k != "params"} for g in got_opt.param_groups]
    shared = got_opt.state[got[0]]["step"]  # the slip: one step tensor, group 0's settings everywhere
    got_opt.state[got[1]]["step"] = shared
    got_opt.param_groups[1]["weight_decay"] = 0.1
    (tmp_path / "latest_universal").write_text("global_step2_universal")
    (tmp_path / "global_step2_universal" / "zero").mkdir(parents=True)
    torch.save(
        {"optimizer_state_dict": {"param_groups": saved}},
        tmp_path / "global_step2_universal" / "zero" / "optimizer_state.pt",
    )

    class Zero:  # DeepSpeed's ZeRO optimizer wraps the torch one as ``.optimizer``
        optimizer = got_opt

    assert mend_zero3_universal_load(Zero(), str(tmp_path)) == {
        "steps_unshared": 1,
        "hyperparameters_restored": 1,
    }
    for opt, params in ((want_opt, want), (got_opt, got)):
        opt.zero_grad()
        sum((p * p).sum() for p in params).backward()
        opt.step()
    assert [float(got_opt.state[p]["step"]) for p in got] == [3.0, 3.0]
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a, b)
