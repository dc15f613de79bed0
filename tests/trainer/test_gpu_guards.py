"""A GPU machine never trains on its CPU by accident: an old NVIDIA driver is refused at install, and a run
whose torch cannot see the GPUs nvidia-smi lists stops unless --use_cpu says so."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.training import grpo_args

FAKE_SMI = """#!/usr/bin/env bash
case "$*" in
  *driver_version*) echo "{driver}" ;;
  *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;
esac
"""


@pytest.mark.parametrize(("driver", "refused"), [("570.86.15", True), ("580.65.06", False)])
def test_install_refuses_a_driver_older_than_580(tmp_path, driver, refused):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI.format(driver=driver))
    (bin_dir / "nvidia-smi").chmod(0o755)
    # a copy of install.sh in an empty folder: past the driver check it only fails to find pyproject.toml
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "install.sh").write_text((ROOT / "install.sh").read_text())
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": "false"}
    done = subprocess.run(
        ["bash", "install.sh"], cwd=tmp_path / "repo", env=env, capture_output=True, text=True
    )
    if refused:
        assert done.returncode == 2 and f"NVIDIA driver {driver} is older than 580" in done.stderr
    else:
        assert "older than 580" not in done.stderr


def test_training_refuses_a_silent_cpu_fallback_on_a_gpu_machine(tmp_path, monkeypatch):
    import torch

    from r1vision.trainer import config as config_module

    monkeypatch.setattr(config_module, "nvidia_gpus", lambda: ["GPU 0: NVIDIA H100 80GB HBM3"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        ValueError, match="nvidia-smi lists 1 GPU.*--use_cpu true to train on the CPU on purpose"
    ):
        grpo_args(tmp_path, use_cpu=False)
    assert grpo_args(tmp_path, use_cpu=True).use_cpu  # asked for: fine
