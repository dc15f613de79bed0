"""Text-to-image GRPO on 1 and on 2 CPU processes with the same global batch: steps per second.

The smoke recipe's tiny pixel-space SD3 model and brightness reward, launched as a user launches it
(``r1vision t2i-grpo --config t2i_smoke``): one process with 16 images per step, then two processes with
8 each (``--num_processes 2``, gloo), one torch thread per process, alternated ``--repeats`` times. The rate
is the trainer's own (``trained N steps in S s``: model loading and evaluation excluded).

    PYTHONPATH=src python benchmarks/bench_t2i_processes.py [--steps 40 --repeats 2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATE = re.compile(r"trained (\d+) steps in ([\d.]+) s")


def one_run(workdir: Path, processes: int, steps: int, tag: str) -> float:
    """Seconds per step of one launched run."""
    out = workdir / f"run-{tag}"
    args = [sys.executable, "-m", "r1vision.cli", "t2i-grpo", "--config", "t2i_smoke", "--model",
            str(workdir / "tiny"), "--dataset", str(workdir / "prompts"), "--output_dir", str(out),
            "--max_steps", str(steps), "--eval_strategy", "no", "--save_strategy", "no", "--disable_tqdm", "true",
            "--per_device_train_batch_size", str(16 // processes), "--num_processes", str(processes)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    match = RATE.search(done.stdout + done.stderr)
    if done.returncode or not match:
        raise RuntimeError(
            f"run {tag} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return float(match.group(2)) / int(match.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    from r1vision.diffusion.data import synth_t2i
    from r1vision.testing.tiny_diffusion import make_tiny_sd3

    workdir = Path(tempfile.mkdtemp(prefix="bench_t2i_proc_"))
    make_tiny_sd3(workdir / "tiny", pixel_space=True)
    synth_t2i(workdir / "prompts", 16, kind="brightness")
    times: dict[int, list[float]] = {1: [], 2: []}
    start = time.time()
    for r in range(a.repeats):
        for n in (1, 2) if r % 2 == 0 else (2, 1):  # alternated
            times[n].append(one_run(workdir, n, a.steps, f"{n}p{r}"))
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"{a.steps} steps of 16 images (2 prompts x 8) per step, 1 torch thread per process, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, {time.time() - start:.0f} s")  # fmt: skip
    print("| processes | images per process and step | s per step (median) | steps/s | ratio to 1 process |")
    print("|---|---|---|---|---|")
    for n, value in ((1, one), (2, two)):
        print(f"| {n} | {16 // n} | {value:.3f} | {1 / value:.2f} | {one / value:.2f}x |")
    print("every run:", {n: [round(t, 3) for t in v] for n, v in times.items()})


if __name__ == "__main__":
    main()
