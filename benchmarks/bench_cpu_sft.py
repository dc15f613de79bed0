"""SFT on a CPU with the real 151,936-token vocabulary: torch's large CPU tensors on transparent huge pages
(``THP_MEM_ALLOC_ENABLE=1``, what the ``r1vision`` command sets on a machine without an NVIDIA GPU) against
torch's default 4 KiB pages.

TRL's SFT loss projects every position through the LM head, so a micro-batch of scene-graph rows makes
logits and their gradients of gigabytes, allocated afresh at every step: with 4 KiB pages the kernel faults
in and zeroes each page, and that system time is most of the step. Workload: the shipped ``sgg_sft`` recipe
through the ``r1vision sft`` command, on the real-config Qwen2-VL of the test suite (real vocabulary and
processor, tiny widths), rows from ``r1vision synth --task sgg`` (default preset), one optimizer step of one
micro-batch of ``--batch`` rows. Each arm runs in its own process (torch reads the setting at its first
allocation), the arms alternated ``--repeats`` times; reported: the step's ``train_runtime`` (from
``metrics.csv``, start-up excluded) and the process's user / system seconds, peak RSS and minor page faults.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_cpu_sft.py [--repeats 3] [--batch 4]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ARMS = {"4 KiB pages (torch default)": "0", "huge pages (r1vision CLI default)": "1"}


def run_arm(cli: Path, model: Path, data: Path, out: Path, thp: str, batch: int, threads: int) -> dict:
    """One ``r1vision sft`` step in a fresh process: the step's seconds and the process's own rusage."""
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": thp, "OMP_NUM_THREADS": str(threads)}
    argv = [str(cli), "sft", "--config", "sgg_sft", "--model", str(model), "--dataset", str(data),
            "--output_dir", str(out), "--max_steps", "1", "--per_device_train_batch_size", str(batch),
            "--gradient_accumulation_steps", "1", "--report_to", "none"]  # fmt: skip
    with open(out.parent / f"{out.name}.log", "w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's rusage alone (peak RSS included)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        tail = (out.parent / f"{out.name}.log").read_text()[-3000:]
        raise SystemExit(f"sft failed ({proc.returncode}):\n{tail}")
    with open(out / "metrics.csv") as f:
        row = next(csv.DictReader(f))
    return {
        "step_s": float(row["train_runtime"]),
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "minflt": usage.ru_minflt,
        "maxrss_gib": usage.ru_maxrss / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=4, help="rows in the step's one micro-batch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", default=None)
    a = p.parse_args(argv)
    from machine_info import describe
    from tests.helpers.realcfg import realcfg_model_path

    from r1vision.tasks import get_task

    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_cpu_sft_"))
    data = work / "data"
    if not (data / "train.parquet").exists():
        get_task("sgg").synth(data, max(a.batch, 8), seed=0, split="train", options={})
    model = realcfg_model_path("qwen2_vl", cache_dir=work / "models")
    cli = Path(sys.executable).with_name("r1vision")
    print(f"machine: {describe()}; torch threads {a.threads}; THP {_thp_mode()}", flush=True)
    rows: dict[str, list[dict]] = {name: [] for name in ARMS}
    for rep in range(a.repeats):
        order = list(ARMS) if rep % 2 == 0 else list(reversed(ARMS))
        for name in order:
            out = work / f"run-{rep}-{ARMS[name]}"
            got = run_arm(cli, model, data, out, ARMS[name], a.batch, a.threads)
            rows[name].append(got)
            print(f"repeat {rep} {name}: {got}", flush=True)
    base = statistics.median(r["step_s"] for r in rows[next(iter(ARMS))])
    print(f"\nsgg_sft, one step of {a.batch} rows, median of {a.repeats} alternated runs per arm\n")
    print(
        "| allocation | step s | process user s | process sys s | minor faults | peak RSS GiB | speed vs 4 KiB pages |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, got in rows.items():
        med = {k: statistics.median(r[k] for r in got) for k in got[0]}
        print(f"| {name} | {med['step_s']:.1f} | {med['user_s']:.1f} | {med['sys_s']:.1f} "
              f"| {med['minflt'] / 1e6:.2f} M | {med['maxrss_gib']:.2f} | {base / med['step_s']:.2f}x |")  # fmt: skip
    return 0


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    return text.split("[", 1)[-1].split("]", 1)[0]


if __name__ == "__main__":
    raise SystemExit(main())
