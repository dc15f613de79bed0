"""Faults and preemption: kill or signal real runs at random moments, resume them, count what was lost.

For each command (``grpo`` on the tiny Qwen2-VL and the color task, ``t2i-grpo`` on the tiny pixel-space
SD3, ``infer`` on the color test split) one uninterrupted reference run, then ``--trials`` runs that each
get SIGKILL (a node failure, an OOM kill) or SIGTERM (a Slurm preemption), alternately, at a random moment
after the first step, and are then resumed as a requeued job would be (``--resume_from_checkpoint auto``;
``infer``: the same command again). Reported per command and signal:

- rows lost / duplicated: ``metrics.csv`` must end with exactly one row per step (trainers); every test row
  exactly once in the shards (``infer``);
- resume equality: the largest relative difference of the resumed run's per-step loss (trainers) or records
  (``infer``: equal completions) from the reference;
- work lost per interruption: the seconds of the step (``infer``: batch) in flight when a SIGKILL came,
  plus any finished steps the resume had to redo (steps done at the signal minus the checkpoint it resumed
  from, in the reference's mean step time); a SIGTERM lets the step finish and checkpoint.

    .venv/bin/python benchmarks/bench_faults.py [--trials 20] [--steps 6] [--seed 0] [--only grpo,infer]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
           TOKENIZERS_PARALLELISM="false")  # fmt: skip


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "r1vision.cli", *args]


def _steps(out: Path) -> list[str]:
    path = out / "metrics.csv"
    if not path.is_file():
        return []
    with open(path) as f:
        return [r["step"] for r in csv.DictReader(f) if r.get("loss")]


def _losses(out: Path) -> dict[str, float]:
    with open(out / "metrics.csv") as f:
        return {r["step"]: float(r["loss"]) for r in csv.DictReader(f) if r.get("loss")}


def _checkpoint_steps(out: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
    )


def _records(out: Path) -> list[dict]:
    rows = []
    for shard in sorted(out.glob("*.jsonl")):
        for line in shard.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a torn line: the rerun writes that row again
    return rows


class Trainer:
    """``grpo`` / ``t2i-grpo``: a checkpoint every step, so a kill loses at most the step in flight."""

    def __init__(self, name: str, argv: list[str], steps: int) -> None:
        self.name, self.argv, self.steps = name, argv, steps

    def command(self, out: Path, resume: bool) -> list[str]:
        extra = ["--resume_from_checkpoint", "auto"] if resume else []
        return _cli(*self.argv, "--output_dir", str(out), "--max_steps", str(self.steps), "--save_strategy",
                    "steps", "--save_steps", "1", *extra)  # fmt: skip

    def progress(self, out: Path) -> int:
        return len(_steps(out))

    def complete(self, out: Path) -> bool:
        return (out / "r1vision_run.json").is_file()  # written with the final folder

    def check(self, out: Path, ref: Path, at_signal: int, resumed_from: int) -> dict:
        steps = _steps(out)
        want = [str(s) for s in range(1, self.steps + 1)]
        ref_loss, loss = _losses(ref), _losses(out)
        diff = max(abs(loss[s] - ref_loss[s]) / max(abs(ref_loss[s]), 1e-6) for s in want if s in loss)
        return {"lost": len(set(want) - set(steps)), "duplicated": len(steps) - len(set(steps)),
                "resume_rel_diff": diff, "steps_lost": max(at_signal - resumed_from, 0)}  # fmt: skip


class Infer:
    """``infer``: records written as they are generated; a rerun skips finished rows."""

    name = "infer"

    def __init__(self, argv: list[str], rows: int) -> None:
        self.argv, self.rows = argv, rows

    def command(self, out: Path, resume: bool) -> list[str]:
        return _cli(*self.argv, "--output_dir", str(out))

    def progress(self, out: Path) -> int:
        return len(_records(out))

    def complete(self, out: Path) -> bool:
        return len(_records(out)) >= self.rows

    def check(self, out: Path, ref: Path, at_signal: int, resumed_from: int) -> dict:
        got, want = _records(out), {r["index"]: r["completion"] for r in _records(ref)}
        seen = [r["index"] for r in got]
        same = all(want.get(r["index"]) == r["completion"] for r in got)
        return {"lost": len(set(want) - set(seen)), "duplicated": len(seen) - len(set(seen)),
                "resume_rel_diff": 0.0 if same else 1.0, "steps_lost": 0}  # fmt: skip


def _run(cmd: list[str]) -> tuple[int, float]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    if proc.returncode not in (0, 75):
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.returncode, time.perf_counter() - t


def _trial(spec, tmp: Path, ref: Path, n: int, sig: signal.Signals, rng: random.Random, unit: int) -> dict:
    out = tmp / f"{spec.name}-{n}"
    proc = subprocess.Popen(spec.command(out, resume=False), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    target = rng.randint(1, max(unit - 1, 1))  # signal once this much progress is on disk...
    extra = rng.uniform(0.0, 1.0)  # ...and this much later, somewhere inside the next step
    progress, last_change, deadline = 0, time.perf_counter(), None
    while proc.poll() is None:
        now, seen = time.perf_counter(), spec.progress(out)
        if seen != progress:
            progress, last_change = seen, now
        if deadline is None and progress >= target:
            deadline = now + extra
        if deadline is not None and now >= deadline:
            break
        time.sleep(0.02)
    at_signal = spec.progress(out)
    done_at_signal = spec.complete(out)  # the command's outputs were all written before the signal
    finished_first = proc.poll() is not None
    if not finished_first:
        proc.send_signal(sig)
    since_boundary = time.perf_counter() - last_change
    rc = proc.wait()
    checkpoints = _checkpoint_steps(out) if isinstance(spec, Trainer) else []
    resumed_from = checkpoints[-1] if checkpoints else 0
    _run(spec.command(out, resume=True))
    result = spec.check(out, ref, at_signal, resumed_from)
    # a kill also loses the step (infer: the batch) in flight; a SIGTERM lets it finish and checkpoint
    in_flight = since_boundary if sig == signal.SIGKILL and not finished_first else 0.0
    return {"signal": sig.name, "rc": rc, "finished_before_signal": finished_first, "in_flight_s": in_flight,
            "outputs_complete_at_signal": done_at_signal,
            **result}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="grpo,t2i-grpo,infer")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from r1vision.testing.tiny import tiny_model_path
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    rng = random.Random(a.seed)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for task, split, n in (("color", "train", 16), ("color", "test", 24)):
            subprocess.run(_cli("synth", "--task", task, "--output_dir", str(tmp / "color"), "--n", str(n),
                                "--split", split), env=ENV, check=True, capture_output=True)  # fmt: skip
        subprocess.run(_cli("synth", "--task", "t2i_brightness", "--output_dir", str(tmp / "prompts"), "--n", "8"),
                       env=ENV, check=True, capture_output=True)  # fmt: skip
        vlm, sd3 = str(tiny_model_path("qwen2_vl")), str(tiny_sd3_path(pixel_space=True))
        specs = {
            "grpo": Trainer(
                "grpo",
                [
                    "grpo",
                    "--config",
                    "color_smoke",
                    "--model",
                    vlm,
                    "--dataset",
                    str(tmp / "color"),
                    "--disable_tqdm",
                    "true",
                ],
                a.steps,
            ),  # fmt: skip
            "t2i-grpo": Trainer(
                "t2i-grpo",
                [
                    "t2i-grpo",
                    "--config",
                    "t2i_smoke",
                    "--model",
                    sd3,
                    "--dataset",
                    str(tmp / "prompts"),
                    "--eval_strategy",
                    "no",
                    "--disable_tqdm",
                    "true",
                ],
                a.steps,
            ),  # fmt: skip
            "infer": Infer(
                [
                    "infer",
                    "--task",
                    "color",
                    "--model",
                    vlm,
                    "--dataset",
                    str(tmp / "color"),
                    "--split",
                    "test",
                    "--batch_size",
                    "2",
                    "--max_new_tokens",
                    "6",
                ],
                24,
            ),  # fmt: skip
        }
        for name in a.only.split(","):
            spec = specs[name]
            ref = tmp / f"{name}-ref"
            _, wall = _run(spec.command(ref, resume=False))
            unit = a.steps if isinstance(spec, Trainer) else spec.rows
            step_s = wall / unit
            results[name] = []
            for n in range(a.trials):
                sig = signal.SIGKILL if n % 2 == 0 else signal.SIGTERM
                r = _trial(spec, tmp, ref, n, sig, rng, unit)
                r["seconds_lost"] = r["steps_lost"] * step_s + r["in_flight_s"]
                results[name].append(r)
                print(name, n, json.dumps(r), flush=True)
    print(f"\n{a.trials} trials per command ({a.steps} steps; infer: 24 rows), seed {a.seed}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| command | signal | trials | exit codes | rows lost | rows duplicated | max resume rel. diff | "
          "work lost per interruption, mean s (max) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        for sig in ("SIGKILL", "SIGTERM"):
            part = [r for r in rows if r["signal"] == sig]
            if not part:
                continue
            lost = [r["seconds_lost"] for r in part]
            codes = ", ".join(
                f"{c}: {sum(r['rc'] == c for r in part)}" for c in sorted({r["rc"] for r in part})
            )
            print(f"| {name} | {sig} | {len(part)} | {codes} | {sum(r['lost'] for r in part)} | "
                  f"{sum(r['duplicated'] for r in part)} | {max(r['resume_rel_diff'] for r in part):.1e} | "
                  f"{statistics.mean(lost):.2f} ({max(lost):.2f}) |")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
