"""Running a launched (``accelerate launch``) command in a test: the environment of a CPU run with two ranks
on two cores, a hang guard, and the output's tail in the failure message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

TIMEOUT_S = 1800  # a hang guard only: >= 5x a loaded run (a first ZeRO run also compiles a CPU op)


def launch_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",  # two ranks on two cores: more threads only oversubscribe
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        WANDB_DISABLED="true",
        **extra,
    )
    return env


def run_launched(
    cmd: list[str], cwd: Path, timeout: float = TIMEOUT_S, **env: str
) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test with the output's tail on a non-zero exit or after ``timeout`` seconds."""
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=launch_env(**env), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"timed out after {timeout:.0f}s: {' '.join(cmd)}\n{out[-6000:]}\n{err[-6000:]}")
    if proc.returncode != 0:
        pytest.fail(
            f"exit {proc.returncode}: {' '.join(cmd)}\n--- stdout\n{proc.stdout[-6000:]}\n"
            f"--- stderr\n{proc.stderr[-8000:]}"
        )
    return proc
