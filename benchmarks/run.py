"""Run every benchmark, print one markdown report, write JSON and ``benchmarks/RESULTS.md``.

Each benchmark measures its own baseline in the same run and prints a markdown table with ratios; this
runner executes them one after another (never in parallel: they time CPU work), collects their tables
and stamps the report with the date, commit and machine.

    .venv/bin/python benchmarks/run.py [--quick] [--only sgg_rewards,svg] [--out benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from machine_info import describe

HERE = Path(__file__).resolve().parent

# name -> (script, full args, quick args). The demo row uses seeds 20-22: seeds 0, 1 and 10 chose its split.
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "trainer_overhead": ("bench_trainer_overhead.py", ["--steps", "8", "--rounds", "8"], ["--steps", "2", "--rounds", "1"]),
    "sgg_rewards": ("bench_sgg_rewards.py", ["--n", "200"], ["--n", "40"]),
    "sgg_eval": ("bench_sgg_eval.py", ["--images", "5000"], ["--images", "300"]),
    "geometry_verify": ("bench_geometry_verify.py", ["--seconds", "1.0", "--rounds", "2"], ["--seconds", "0.3", "--rounds", "1"]),
    "svg_reward": ("bench_svg_reward.py", ["--n", "64"], ["--n", "16"]),
    "backends": ("bench_backends.py", [], ["--steps", "3", "--warmup", "1", "--max-completion", "16"]),
    "lora_sync": ("bench_lora_sync.py", [], ["--repeats", "2"]),
    "t2i": ("bench_t2i.py", ["--repeats", "5"], ["--repeats", "1"]),
    "demo": ("bench_demo.py", ["--seed", "20", "--seeds", "3"], ["--seeds", "1", "--quick"]),
}  # fmt: skip
# Benchmarks that need vLLM run in its CPU environment when there is one (scripts/install_vllm_cpu.sh).
VLLM_PYTHON = HERE.parent / ".venv-vllm" / "bin" / "python"
NEEDS_VLLM = {"backends", "lora_sync"}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _table(stdout: str) -> str:
    """The markdown lines a benchmark printed (plus the line before the table, which names the setting)."""
    lines = stdout.splitlines()
    keep = [i for i, ln in enumerate(lines) if ln.startswith("|")]
    if not keep:
        return "\n".join(lines[-5:])
    start = max(0, keep[0] - 1)
    return "\n".join(ln for ln in lines[start : keep[-1] + 1] if ln.strip())


def _earlier(path: Path) -> str:
    """What ``path`` held before, below the new run (newest first): earlier runs and notes are history."""
    if not path.exists():
        return ""
    old = path.read_text()
    if old.startswith("# Benchmark results"):
        old = old[len("# Benchmark results") :].lstrip("\n")
    return "\n" + old if old.strip() else ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run of the whole suite")
    p.add_argument("--only", default=None, help="comma-separated benchmark names")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument("--json", default=str(HERE / "results.json"))
    p.add_argument("--timeout", type=int, default=3600, help="seconds per benchmark")
    a = p.parse_args()
    names = a.only.split(",") if a.only else list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    env = dict(
        os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    header = (f"# Benchmark results\n\n## Run of {dt.date.today().isoformat()}, commit {_commit()}, {describe()} at "
              f"start{' (quick sizes)' if a.quick else ''}\n")  # fmt: skip
    sections, results = [header], {}
    for name in names:
        script, full, quick = BENCHMARKS[name]
        if not (HERE / script).exists():
            sections.append(f"## {name}\n\nnot available ({script} missing)\n")
            continue
        start = time.time()
        python = str(VLLM_PYTHON) if name in NEEDS_VLLM and VLLM_PYTHON.exists() else sys.executable
        proc = subprocess.run([python, str(HERE / script), *(quick if a.quick else full)],
                              capture_output=True, text=True, env=env, timeout=a.timeout)  # fmt: skip
        took = time.time() - start
        status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        body = _table(proc.stdout) if proc.returncode == 0 else proc.stderr[-2000:]
        sections.append(f"### {name} ({status}, {took:.0f} s)\n\n{body}\n")
        results[name] = {"status": status, "seconds": took, "stdout": proc.stdout[-10000:]}
        print(sections[-1], flush=True)
    Path(a.out).write_text("\n".join(sections) + _earlier(Path(a.out)))
    Path(a.json).write_text(json.dumps(results, indent=2))
    print(f"wrote {a.out} and {a.json}")
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
