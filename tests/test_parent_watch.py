"""A launched worker ends when its launcher is killed (no orphaned infer/train workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.paths import env_with_src

# The launcher starts a worker that runs the r1vision CLI entry with torchrun's environment, then waits.
LAUNCHER = r"""
import os, subprocess, sys
env = dict(os.environ, LOCAL_RANK="0", TORCHELASTIC_RUN_ID="test")
worker = subprocess.Popen([sys.executable, "-c", '''
import sys, time
import r1vision.cli as cli
from r1vision.commands import tasks
tasks.run = lambda argv: time.sleep(120)  # a command that would outlive its launcher
cli.main(["tasks"])
'''], env=env)
print(worker.pid, flush=True)
worker.wait()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited; only its parent has not reaped it
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_worker_exits_when_its_launcher_is_killed():
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True, env=env_with_src()
    )
    worker = int(launcher.stdout.readline())
    time.sleep(3.0)  # the worker has imported r1vision and is inside its command
    assert _alive(worker)
    launcher.send_signal(signal.SIGKILL)  # as an OOM kill: no chance to pass anything on
    launcher.wait()
    deadline = time.time() + 15
    while _alive(worker) and time.time() < deadline:
        time.sleep(0.2)
    try:
        assert not _alive(worker), "the worker outlived its launcher"
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_unlaunched_processes_are_not_watched(monkeypatch):
    from r1vision import parent_watch

    for name in parent_watch.LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not parent_watch.launched()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert parent_watch.launched()
