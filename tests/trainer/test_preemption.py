"""Preemption: a signal (Slurm's --signal=USR1@300, a preemption's SIGTERM) stops a run at the next step
boundary with a complete checkpoint, exit code 75 and ``preempted.json``; ``--resume_from_checkpoint auto``
continues it (and starts fresh when there is nothing to resume). On two processes a signal that reaches
one rank stops both at the same step."""

from __future__ import annotations

import csv
import json
import sys

import pytest

from r1vision.cli import main
from r1vision.trainer.preemption import EXIT_PREEMPTED, PREEMPTED_FILE
from tests.helpers.paths import ROOT

REWARD = "tests.helpers.t2i_rewards.signal_self"


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):

    root = tmp_path_factory.mktemp("preempt")
    (root / "p").mkdir()
    (root / "p" / "train.txt").write_text("\n".join(f"a bright photo, number {i}" for i in range(8)) + "\n")
    return root


def _argv(model: str, root, out: str, *extra: str) -> list[str]:
    return ["t2i-grpo", "--config", "t2i_smoke", "--model", model, "--dataset", str(root / "p"),
            "--output_dir", str(root / out), "--reward_funcs", REWARD, "--eval_strategy", "no",
            "--save_strategy", "no", "--disable_tqdm", "true", *extra]  # fmt: skip


def _steps(path) -> list[str]:
    with open(path) as f:
        return [r["step"] for r in csv.DictReader(f)]


@pytest.mark.slow
def test_a_signal_stops_at_the_step_with_a_checkpoint_and_auto_resumes(prompts, monkeypatch, capsys):
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    model = str(tiny_sd3_path(pixel_space=True))
    monkeypatch.setenv("R1V_SIGNAL_AT", "3")  # the reward of step 3 sends the signal
    monkeypatch.chdir(ROOT)
    assert main(_argv(model, prompts, "run", "--max_steps", "6")) == EXIT_PREEMPTED
    out = prompts / "run"
    marker = json.loads((out / PREEMPTED_FILE).read_text())
    assert marker["step"] == 3 and marker["signal"] == "SIGUSR1"
    assert (out / "checkpoint-3" / "trainer_state.json").is_file()  # complete, although save_strategy no
    assert not (out / "lora").exists()  # the final folder belongs to the run that finishes
    assert _steps(out / "metrics.csv") == ["1", "2", "3"]
    assert "preempted: stopped at step 3 on SIGUSR1" in capsys.readouterr().err
    monkeypatch.setenv("R1V_SIGNAL_AT", "0")
    assert main(_argv(model, prompts, "run", "--max_steps", "6", "--resume_from_checkpoint", "auto")) == 0
    assert _steps(out / "metrics.csv") == ["1", "2", "3", "4", "5", "6"]
    assert not (out / PREEMPTED_FILE).exists() and (out / "lora_ema").is_dir()
    # auto with nothing to resume starts fresh
    assert main(_argv(model, prompts, "fresh", "--max_steps", "1", "--resume_from_checkpoint", "auto")) == 0


@pytest.mark.slow
def test_a_signal_to_one_of_two_processes_stops_both_at_one_step(prompts):
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    model = str(tiny_sd3_path(pixel_space=True))
    dump = prompts / "dump"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--num_processes", "2",
           "--multi_gpu", "--mixed_precision", "no", str(ROOT / "tests" / "scripts" / "t2i_grpo.py"), str(dump),
           "--", *_argv(model, prompts, "two", "--max_steps", "8", "--per_device_train_batch_size", "8",
                        "--use_cpu", "true")[1:]]  # fmt: skip
    from tests.helpers.launch import launch_env, run_command

    proc = run_command(cmd, ROOT, launch_env(R1V_SIGNAL_AT="2", R1V_SIGNAL_RANK="1"), timeout=900)
    assert proc.returncode != 0  # the launcher relays the workers' 75 as a failure; the marker says why
    ranks = [json.loads((dump / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 2, proc.stderr[-3000:]
    assert json.loads((prompts / "two" / PREEMPTED_FILE).read_text())["step"] == 2
    assert (prompts / "two" / "checkpoint-2" / "trainer_state.json").is_file()


def test_signals_held_catches_and_restores():
    import os
    import signal

    from r1vision.trainer.preemption import signals_held

    before = signal.getsignal(signal.SIGUSR1)
    with signals_held([signal.SIGUSR1]) as held:
        os.kill(os.getpid(), signal.SIGUSR1)  # would end the process with the default action
        os.kill(os.getpid(), signal.SIGUSR1)
    assert held.received == "SIGUSR1" and signal.getsignal(signal.SIGUSR1) == before


def test_a_signal_after_the_last_step_waits_for_the_final_folder(prompts, monkeypatch):
    """bench_faults.py found it: a SIGTERM during the final save killed the process (-15) with the final
    folder half written. The wrap-up now holds it: the folder is complete and the command exits 0."""
    import os
    import signal

    from r1vision.diffusion.trainer import DiffusionGRPOTrainer
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    model = str(tiny_sd3_path(pixel_space=True))
    save = DiffusionGRPOTrainer.save_model
    signalled = []

    def save_after_a_signal(self, *args, **kwargs):
        if not kwargs.get("_internal_call") and not signalled:
            signalled.append(True)
            os.kill(os.getpid(), signal.SIGTERM)  # the preemption arrives as the final folder is written
        return save(self, *args, **kwargs)

    monkeypatch.setattr(DiffusionGRPOTrainer, "save_model", save_after_a_signal)
    monkeypatch.setenv("R1V_SIGNAL_AT", "0")
    monkeypatch.chdir(ROOT)
    assert main(_argv(model, prompts, "late", "--max_steps", "2")) == 0
    out = prompts / "late"
    assert signalled and (out / "lora").is_dir() and not (out / PREEMPTED_FILE).exists()
    assert _steps(out / "metrics.csv") == ["1", "2"]
