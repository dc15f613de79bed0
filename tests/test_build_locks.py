"""The suite clears a torch-extension build lock left by a killed process (ZeRO tests waited on one for their
whole 1,800 s timeout), and leaves a fresh one (a build in progress) alone."""

from __future__ import annotations

import os
import time

from tests.conftest import _clear_stale_build_locks


def test_stale_locks_go_and_fresh_ones_stay(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    stale = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"
    fresh = tmp_path / "py311_cpu" / "other_op" / "lock"
    for lock in (stale, fresh):
        lock.parent.mkdir(parents=True)
        lock.touch()
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert _clear_stale_build_locks() == [stale]
    assert not stale.exists() and fresh.exists()
