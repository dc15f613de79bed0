"""Running the ``r1vision`` command in a subprocess, and the argument lists the pipeline tests share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import env_with_src


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 300):
    """``python -m r1vision.cli ARGS`` in a subprocess (this checkout's ``src`` first); the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "r1vision.cli", *args], cwd=cwd, env=env or env_with_src(), capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def quick_train_args(
    dataset: str | Path, task: str, *, batch: int, max_pixels: int, max_steps: int = 1
) -> list[str]:
    """``r1vision sft`` / ``grpo`` arguments for a quick CPU run: every step logged, nothing saved or reported."""
    return [
        "--dataset", str(dataset), "--task", task, "--per_device_train_batch_size", str(batch),
        "--max_steps", str(max_steps), "--logging_steps", "1", "--report_to", "none",
        "--save_strategy", "no", "--use_cpu", "true", "--max_pixels", str(max_pixels),
    ]  # fmt: skip


def infer_args(
    task: str,
    model: str | Path,
    dataset: str | Path,
    out: str | Path,
    *,
    max_new_tokens: int,
    max_pixels: int,
) -> list[str]:
    """``r1vision infer`` arguments over the test split of ``dataset``."""
    return [
        "infer", "--task", task, "--model", str(model), "--dataset", str(dataset), "--split", "test",
        "--output_dir", str(out), "--max-new-tokens", str(max_new_tokens), "--max-pixels", str(max_pixels),
    ]  # fmt: skip


def scoring_args(command: str, task: str, gt: str | Path, pred: str | Path, *extra: str) -> list[str]:
    """``r1vision eval`` / ``viz`` arguments: ground truth, predictions and any further options."""
    return [command, "--task", task, "--dataset", str(gt), "--pred", str(pred), *extra]


def synth_splits(task: str, out: str | Path, splits: dict[str, int], *extra: str) -> Path:
    """``r1vision synth`` once per split (``{"train": 4, "test": 2}``; seed 0 for train, 1 for the others);
    asserts each exits 0. ``extra``: further flags (``--synth_options JSON``)."""
    from r1vision.cli import main

    for split, n in splits.items():
        seed = "0" if split == "train" else "1"
        argv = [
            "synth",
            "--task",
            task,
            "--output_dir",
            str(out),
            "--n",
            str(n),
            "--seed",
            seed,
            "--split",
            split,
        ]
        assert main([*argv, *extra]) == 0, (task, split)
    return Path(out)
