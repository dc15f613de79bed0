"""Shared fixtures: tiny models (built once, cached on disk) and small synthetic datasets."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

from tests.helpers.fake_hub import fake_hub  # noqa: E402, F401 - a fixture for the Hub-lookup tests
from tests.helpers.launch import launch_env  # noqa: E402, F401 - notes the session's environment now

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

# os._exit inside the pytest process would end the run with whatever code it was given: a test that calls
# a CLI entry in-process (which may leave through trainer.distributed.finish_process) could stop the
# suite silently with exit code 0. In this process it raises instead; forked children exit as usual.
_PYTEST_PID = os.getpid()
_real_os_exit = os._exit


def _guarded_os_exit(code: int) -> None:
    if os.getpid() == _PYTEST_PID:
        raise RuntimeError(f"os._exit({code}) called inside the pytest process")
    _real_os_exit(code)


os._exit = _guarded_os_exit


def _clear_stale_build_locks(max_age_s: float = 600.0) -> list[Path]:
    """Remove torch-extension build locks older than ``max_age_s``: a process killed while DeepSpeed built its
    CPU op leaves ``lock`` behind, and every later ZeRO test then waits on it until its timeout (1,800 s)."""
    import time

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
    removed = []
    for lock in root.glob("*/*/lock") if root.is_dir() else []:
        if time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink(missing_ok=True)
            removed.append(lock)
    return removed


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.helpers.launch import LAUNCHES, python_launches

    # a slow lane where every launch ran cold has lost its warm launcher: these lines say why
    for what, counts in (
        ("launched commands", LAUNCHES),
        ("warm_python commands", Counter(python_launches())),
    ):
        if counts:
            line = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            terminalreporter.write_line(f"{what} (tests/helpers/launch.py): {line}")


def pytest_sessionstart(session: pytest.Session) -> None:
    for lock in _clear_stale_build_locks():
        print(f"removed a stale torch-extension build lock: {lock}")


@pytest.fixture(scope="session")
def tiny_model():
    """``tiny_model(family)`` -> path of a cached tiny model folder."""
    from r1vision.testing.tiny import tiny_model_path

    return lambda family="qwen2_vl", **kw: str(tiny_model_path(family, **kw))


@pytest.fixture(scope="session")
def motion_dir(tmp_path_factory) -> Path:
    """A synthetic ``motion`` (video) dataset: MP4 train split, PNG-frame-folder test split."""
    from r1vision.tasks.motion.synth import synth_motion

    root = tmp_path_factory.mktemp("motion")
    synth_motion(root, 8, seed=0, split="train")
    synth_motion(root, 4, seed=0, split="test", container="frames")
    return root


@pytest.fixture(scope="session")
def color_dir(tmp_path_factory) -> Path:
    """A synthetic ``color`` dataset with train and test splits (PNG files + jsonl)."""
    from r1vision.tasks.color.synth import synth_color

    root = tmp_path_factory.mktemp("color")
    synth_color(root, 16, seed=0, split="train")
    synth_color(root, 8, seed=0, split="test")
    return root
