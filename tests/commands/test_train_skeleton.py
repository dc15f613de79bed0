"""The one training-command skeleton (``commands/_train.py``) as ``t2i-grpo`` uses it: the same refusals,
launch flags and dry-run plan as ``sft``/``grpo``."""

from __future__ import annotations

import pytest

from r1vision.cli import main


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from r1vision.diffusion.data import synth_t2i
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    root = tmp_path_factory.mktemp("skeleton")
    synth_t2i(root / "prompts", 8, kind="brightness")
    return ["t2i-grpo", "--config", "t2i_smoke", "--model", str(tiny_sd3_path(pixel_space=True)),
            "--dataset", str(root / "prompts")], root  # fmt: skip


def test_resume_last_without_a_checkpoint_is_one_line(smoke, capsys):
    argv, root = smoke
    assert main([*argv, "--output_dir", str(root / "empty"), "--resume_from_checkpoint", "last"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no complete checkpoint" in err[0] and "Traceback" not in err[0]


def test_zero3_and_a_batch_without_whole_groups_are_refused_before_loading(smoke, capsys):
    argv, root = smoke
    assert main([*argv, "--output_dir", str(root / "z3"), "--accelerate_config", "zero3"]) == 2
    assert "--accelerate_config zero3: not supported by t2i-grpo" in capsys.readouterr().err
    assert main([*argv, "--output_dir", str(root / "odd"), "--per_device_train_batch_size", "3"]) == 2
    assert "does not split into groups of num_generations=8" in capsys.readouterr().err
    assert not (root / "z3").exists() and not (root / "odd").exists()


@pytest.mark.slow
def test_one_process_runs_here_and_a_dry_run_plans_the_launch(smoke, capsys, monkeypatch):
    """``--num_processes 1`` trains in this process (accelerate refuses --multi_gpu with one; the flag
    reached TRL's parser); with ``--dry-run`` the launch flags are the plan, nothing is launched."""
    import subprocess

    argv, root = smoke
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("launched"))
    assert main([*argv, "--output_dir", str(root / "one"), "--num_processes", "1", "--max_steps", "1",
                 "--eval_strategy", "no", "--save_strategy", "no"]) == 0  # fmt: skip
    assert (root / "one" / "lora" / "pytorch_lora_weights.safetensors").is_file()
    plan = [*argv, "--output_dir", str(root / "plan"), "--per_device_train_batch_size", "4", "--dry-run"]
    assert main([*plan, "--num_processes", "2"]) == 0  # 4 x 2 = 8 images: one group of 8
    assert "2 process(es): a generation of 1 prompts x 8 images" in capsys.readouterr().out
    assert main(plan) == 2  # 4 images on one process: not a whole group


@pytest.mark.parametrize(
    ("argv", "missing"),
    [
        (["t2i-grpo", "--config", "t2i_smoke"], "--model is required (a diffusers pipeline folder"),
        (["t2i-grpo", "--config", "t2i_smoke", "--model", "some/pipeline"], "--dataset is required"),
        (["grpo", "--config", "color_smoke", "--dataset", "some/data"], "--model is required (a Hub id"),
        (["sft", "--model", "some/model", "--dataset", "some/data"], "--task is required"),
    ],
)
def test_a_launch_without_what_every_run_needs_is_one_line_before_launching(
    argv, missing, tmp_path, capsys, monkeypatch
):
    """On 2 processes the runner's own refusal came from every worker after the launch, under the launcher's
    traceback (exit 1); the skeleton now refuses before launching, in one line (exit 2)."""
    import subprocess

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # Hub-looking ids pass the pre-check without a lookup
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("launched"))
    assert main([*argv, "--output_dir", str(tmp_path / "run"), "--num_processes", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and missing in err[0], err
