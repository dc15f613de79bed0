"""SFT on a CPU with torch's large CPU tensors on transparent huge pages (``THP_MEM_ALLOC_ENABLE=1``, PyTorch's
own switch) against its default 4 KiB pages, on two workloads:

- ``sgg_sft``: the shipped ``sgg_sft`` recipe through ``r1vision sft`` on the real-config Qwen2-VL of the
  test suite (the real 151,936-token vocabulary and processor, tiny widths), rows from ``r1vision synth
  --task sgg`` (default preset), one optimizer step of one micro-batch of ``--batch`` rows. TRL's SFT loss
  takes logits at every position: gigabytes per micro-batch, allocated afresh each step.
- ``demo_sft``: the scene-graph demo's SFT stage (its 0.6 M-parameter model, 2,048-token vocabulary),
  ``--demo-steps`` steps: many allocations of a few MiB.

Each run is a fresh process (torch reads the switch at its first allocation), the arms alternated
``--repeats`` times; reported: the training seconds (start-up excluded) and the process's user / system
seconds, minor page faults and peak RSS.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_cpu_sft.py [--workloads sgg_sft,demo_sft] [--repeats 3]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ARMS = {"4 KiB pages (torch default)": "0", "huge pages (THP_MEM_ALLOC_ENABLE=1)": "1"}
# the demo's SFT stage alone, timed in the process (argv: folder, steps, threads)
DEMO_SFT = """
import sys, time, torch
from pathlib import Path
from r1vision.demo import arms
from r1vision.demo.config import DemoConfig
from r1vision.demo.sgg import SGGDemo
root, steps = Path(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(int(sys.argv[3]))
cfg = DemoConfig()
task = SGGDemo(cfg)
data = root / "data"
if not data.exists():
    task.make_data(data, 20)
rows = task.rows(data, "train")
base = arms.build_model(cfg, data, 20, rows=rows)
start = time.perf_counter()
arms.train_sft("sft", base, data, root / "sft", cfg, 20, steps, cfg.sft_lr, quiet=True, rows=rows)
print("SFT_SECONDS", time.perf_counter() - start)
"""


def _measured(argv: list[str], env: dict[str, str], log: Path) -> tuple[str, Any]:
    """Run ``argv`` in a fresh process; its output and its own rusage (peak RSS included)."""
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    text = log.read_text()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{argv[1]} failed:\n{text[-3000:]}")
    return text, usage


def run_arm(workload: str, thp: str, out: Path, a: argparse.Namespace, inputs: dict[str, Path]) -> dict:
    """One run of ``workload`` with ``THP_MEM_ALLOC_ENABLE=thp``: training seconds and the process's rusage."""
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": thp, "OMP_NUM_THREADS": str(a.threads)}
    if workload == "sgg_sft":
        cli = Path(sys.executable).with_name("r1vision")
        argv = [str(cli), "sft", "--config", "sgg_sft", "--model", str(inputs["model"]), "--dataset",
                str(inputs["data"]), "--output_dir", str(out), "--max_steps", "1", "--per_device_train_batch_size",
                str(a.batch), "--gradient_accumulation_steps", "1", "--report_to", "none"]  # fmt: skip
        _, usage = _measured(argv, env, out.with_suffix(".log"))
        with open(out / "metrics.csv") as f:
            seconds = float(next(csv.DictReader(f))["train_runtime"])
    else:
        out.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-c", DEMO_SFT, str(out), str(a.demo_steps), str(a.threads)]
        text, usage = _measured(argv, env, out.with_suffix(".log"))
        seconds = float(text.rsplit("SFT_SECONDS", 1)[1].split()[0])
    return {
        "train_s": seconds,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "minflt": usage.ru_minflt,
        "maxrss_gib": usage.ru_maxrss / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default="sgg_sft,demo_sft")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=4, help="sgg_sft: rows in the step's one micro-batch")
    p.add_argument("--demo-steps", type=int, default=200, help="demo_sft: SFT steps")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", default=None)
    a = p.parse_args(argv)
    from machine_info import describe
    from tests.helpers.realcfg import realcfg_model_path

    from r1vision.tasks import get_task

    workloads = a.workloads.split(",")
    unknown = sorted(set(workloads) - {"sgg_sft", "demo_sft"})
    if unknown:
        p.error(f"--workloads: unknown {', '.join(unknown)} (sgg_sft, demo_sft)")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_cpu_sft_"))
    work.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, Path] = {}  # sgg_sft's rows and model; the demo builds its own in each run
    if "sgg_sft" in workloads:
        inputs["data"] = work / "data"
        if not (inputs["data"] / "train.parquet").exists():
            get_task("sgg").synth(inputs["data"], max(a.batch, 8), seed=0, split="train", options={})
        inputs["model"] = realcfg_model_path("qwen2_vl", cache_dir=work / "models")
    print(f"machine: {describe()}; torch threads {a.threads}; THP {_thp_mode()}", flush=True)
    lines = ["| workload | allocation | training s | process user s | process sys s | minor faults "
             "| peak RSS GiB | speed vs 4 KiB pages |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for workload in workloads:
        rows: dict[str, list[dict]] = {name: [] for name in ARMS}
        for rep in range(a.repeats):
            for name in list(ARMS) if rep % 2 == 0 else list(reversed(ARMS)):
                out = work / f"{workload}-{rep}-{ARMS[name]}"
                rows[name].append(run_arm(workload, ARMS[name], out, a, inputs))
                print(f"{workload} repeat {rep} {name}: {rows[name][-1]}", flush=True)
        base = statistics.median(r["train_s"] for r in rows[next(iter(ARMS))])
        for name, got in rows.items():
            med = {k: statistics.median(r[k] for r in got) for k in got[0]}
            lines.append(f"| {workload} | {name} | {med['train_s']:.1f} | {med['user_s']:.1f} | {med['sys_s']:.1f} "
                         f"| {med['minflt'] / 1e6:.2f} M | {med['maxrss_gib']:.2f} | {base / med['train_s']:.2f}x |")  # fmt: skip
    print(f"\nmedians of {a.repeats} alternated runs per arm\n")
    print("\n".join(lines))
    return 0


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    return text.split("[", 1)[-1].split("]", 1)[0]


if __name__ == "__main__":
    raise SystemExit(main())
