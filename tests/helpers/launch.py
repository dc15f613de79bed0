"""Running a launched (``accelerate launch``) command in a test: the environment of a CPU run with two ranks
on two cores, a hang guard, the output's tail in the failure message, and a warm start
(:mod:`tests.helpers.warm_launch`) unless the test asks for a cold one."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.warm_launch import WarmLauncher

TIMEOUT_S = 1800  # a hang guard only: >= 5x a loaded run


# Every launched run's settings: two ranks on two cores (more threads only oversubscribe), offline.
_LAUNCH_VARS = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true"}  # fmt: skip


def launch_env(**extra: str) -> dict[str, str]:
    return {**os.environ, **_LAUNCH_VARS, **extra}


LAUNCHES: Counter[str] = Counter()  # warm, cold (why): reported at the end of the session (tests/conftest.py)
_warm: list[WarmLauncher] = []  # one server per test process, started by the first warm launch
# The server imports under the session's environment as it was before any test changed it (a test that
# monkeypatches HF_HOME and launches must not set what every later launch is compared with).
_SESSION_ENV = dict(os.environ)


def _warm_launcher() -> WarmLauncher | None:
    if os.environ.get("R1VISION_COLD_LAUNCH"):
        return None
    if _warm and _warm[0].server.poll() is not None:
        warnings.warn(f"the warm launcher exited ({_warm[0].log.name}); starting another", stacklevel=2)
        _warm.clear()
    if not _warm:
        _warm.append(WarmLauncher({**_SESSION_ENV, **_LAUNCH_VARS}))
    return _warm[0]


def warm_python() -> str:
    """``python`` for a program a test runs (``PYTHON=`` of a shipped script): the warm launcher's shim
    (:mod:`tests.helpers.warm_client`), whose commands and their ``sys.executable`` children fork warm where
    their environment allows; the real interpreter with ``R1VISION_COLD_LAUNCH``. Give the program
    :func:`launch_env`'s variables, or everything it starts runs cold."""
    warm = _warm_launcher()
    return sys.executable if warm is None else warm.python


def python_launches() -> list[str]:
    """What :func:`warm_python` ran so far this session, a line per command: ``warm`` or ``cold (why)``."""
    return _warm[0].python_launches() if _warm else []


def run_command(
    cmd: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
    cold: bool = False,
) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)`` with ``env`` (default :func:`launch_env`), its
    processes forked from a warm interpreter when :class:`WarmLauncher` accepts the command, unless ``cold``."""
    env = launch_env() if env is None else env
    warm = None if cold else _warm_launcher()
    why = "asked for" if cold else "R1VISION_COLD_LAUNCH" if warm is None else warm.refusal(cmd, env)
    LAUNCHES[f"cold ({why})" if why else "warm"] += 1
    if not why:
        return warm.run(cmd, cwd or Path.cwd(), env, timeout)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_launched(
    cmd: list[str], cwd: Path, timeout: float = TIMEOUT_S, cold: bool = False, **env: str
) -> subprocess.CompletedProcess:
    """Run ``cmd`` (:func:`run_command`, ``env`` added to :func:`launch_env`); fail the test with the output's
    tail on a non-zero exit or after ``timeout`` seconds. ``cold=True`` execs every process as a user's launch
    does (keep one such test per layout)."""
    try:
        proc = run_command(cmd, cwd, launch_env(**env), timeout, cold)
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
