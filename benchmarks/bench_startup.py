"""Start-up cost of ``import r1vision`` and ``r1vision --help`` (issue 16: <= 0.5 s, no torch/transformers),
and of the error path of a bad ``grpo`` command line (issue 23: <= 5 s to the message).

Each command runs in a fresh interpreter, ``--repeats`` times (median). The baseline, measured in the same
run, is what ``import r1vision`` did before the lazy registration: import the image-only processors (and
with them transformers and torch). ``trl --help`` is shown for reference when TRL is installed.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

CASES = [
    ("eager processor import (old `import r1vision`, baseline)", "import r1vision.vision.processor"),
    ("import r1vision", "import r1vision"),
    ("r1vision --help", "from r1vision.cli import main; main(['--help'])"),
    ("r1vision tasks --options sgg", "from r1vision.cli import main; main(['tasks', '--options', 'sgg'])"),
    ("trl --help (reference)", "import sys; sys.argv = ['trl', '--help']; from trl.cli import main; main()"),
    # the error path a user waits for (issue 23: <= 5 s to the message); the baseline is TRL's parser
    # reaching the same typo (what r1vision did before the pre-check)
    ("grpo typo --learnig_rate (message)",
     "from r1vision.cli import main; main(['grpo', '--task', 'color', '--model', 'org/m', '--dataset', 'org/d', "
     "'--output_dir', 'o', '--learnig_rate', '1'])"),
    ("grpo missing local --dataset ./no/such (message)",
     "from r1vision.cli import main; main(['grpo', '--task', 'color', '--model', 'org/m', '--dataset', "
     "'./no/such', '--output_dir', 'o'])"),
    ("TRL parser on the same typo (reference: the old error path)",
     "from r1vision.commands._train import parse; parse('grpo', ['--task', 'color', '--model', 'org/m', "
     "'--dataset', 'org/d', '--output_dir', 'o', '--learnig_rate', '1'])"),
]  # fmt: skip


def seconds(code: str) -> float:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=600)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    seconds("import json")  # warm the file cache for the interpreter itself
    results = [(name, statistics.median(seconds(code) for _ in range(a.repeats))) for name, code in CASES]
    base = results[0][1]
    print(f"median of {a.repeats} fresh interpreters; ratio = time / baseline")
    print(f"{'command':<58} {'seconds':>8} {'ratio':>7}")
    for name, t in results:
        print(f"{name:<58} {t:8.3f} {t / base:7.3f}")


if __name__ == "__main__":
    main()
