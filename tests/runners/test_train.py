"""The ``sft``/``grpo`` runners: output folders that hold a run, refusals as messages."""

from __future__ import annotations

import pytest

from tests.helpers.paths import RECIPE_FILES
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


# ------------------------------------------------------------------------------------------- 9. reruns
def test_training_into_a_used_output_dir_refuses(tiny_model, color_dir, tmp_path):
    """A rerun silently replaced the weights and cut metrics.csv."""
    from r1vision.trainer.checkpoint import OutputDirInUseError
    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir)
    out = tmp_path / "run"
    out.mkdir()
    metrics = "step,epoch,loss\n" + "".join(f"{i},0.1,0.5\n" for i in range(1, 11))
    (out / "metrics.csv").write_text(metrics)
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), varied_reward, args=grpo_args(out), train_dataset=rows
    )
    with pytest.raises(OutputDirInUseError, match="metrics.csv with 10 row.*--overwrite_output_dir"):
        trainer.train()
    assert (out / "metrics.csv").read_text() == metrics
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), varied_reward, args=grpo_args(out, overwrite_output_dir=True, max_steps=1),
        train_dataset=rows,
    )  # fmt: skip
    trainer.train()
    assert len((out / "metrics.csv").read_text().splitlines()) == 2  # header + the new run's one step
    assert grpo_args(tmp_path / "x", resume_from_checkpoint="last").resume_from_checkpoint is True
    # rows the trainer itself wrote before train() (its evaluate()) are not a previous run
    fresh = tmp_path / "fresh"
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), varied_reward, args=grpo_args(fresh, max_steps=1), train_dataset=rows
    )
    (fresh / "metrics.csv").write_text("step,epoch,eval_loss\n0,0.0,0.5\n")
    trainer.train()
    assert trainer.state.global_step == 1


def test_cli_rerun_refusal_is_a_message_not_a_traceback(tiny_model, color_dir, tmp_path, capsys, monkeypatch):
    """From the command line: exit 2 and the message, like every other bad-input error, before the model
    loads; resuming is suggested only when the folder has a complete checkpoint to resume from."""
    import r1vision.runners.train as runner
    from r1vision.cli import main

    monkeypatch.setattr(runner, "run_grpo", lambda *a: pytest.fail("the model loaded before the refusal"))
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.csv").write_text("step,epoch,loss\n1,0.1,0.5\n")
    argv = ["grpo", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir),
            "--output_dir", str(out), "--max_steps", "1", "--use_cpu", "true"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--overwrite_output_dir" in err and "Traceback" not in err
    assert "no complete checkpoint to resume from" in err and "--resume_from_checkpoint last" not in err
    done = out / "checkpoint-1"
    done.mkdir()
    (done / "trainer_state.json").write_text('{"global_step": 1}')
    (done / "model.safetensors").write_bytes(b"")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--resume_from_checkpoint last to continue it" in err and "no complete checkpoint" not in err


def test_cli_resume_last_without_a_complete_checkpoint_is_a_message(tiny_model, color_dir, tmp_path, capsys):
    """--resume_from_checkpoint last with only a torn checkpoint: exit 2 naming it, before the model loads."""
    from r1vision.cli import main

    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)
    argv = ["grpo", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir),
            "--output_dir", str(out), "--max_steps", "1", "--use_cpu", "true",
            "--resume_from_checkpoint", "last"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "checkpoint-2: no trainer_state.json" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
