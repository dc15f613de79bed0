"""Trainer overhead: VisionGRPOTrainer vs stock ``trl.GRPOTrainer`` on the identical tiny-VLM workload.

Both train the same tiny Qwen2-VL on the same rows (PIL images already at the budget size, so the stock
trainer gets no disadvantage from our resizing), with the same reward, seed and settings. What would make
the two do different work is pinned so that the ratio measures overhead only:

- ``bf16`` is set explicitly for both (default ``False``; ``--bf16`` runs both in bf16). Left unset, TRL
  turns it into ``True`` while r1vision's config keeps float32 on a CPU (bf16 autocast is 20-40x slower
  for real Qwen-VL models there), so the two would time different arithmetic.
- ``min_new_tokens = max_completion_length``: every completion has the same length, so a sampled EOS
  cannot make one trainer's step cheaper.
- The per-step inputs are recorded for both (prompt shape, completion tokens, ``pixel_values`` shape) and
  the script says whether they agree.

Times: the steady steps (step-to-step intervals after the first step, from a callback) in process CPU
time, pooled over all rounds (median and lower quartile): on a shared machine wall time mostly measures
the other processes, CPU time much less. Also the steady wall time and the whole ``train()`` call divided
by the steps (which includes the per-run set-up: dataloader, optimizer, first step), best round of each.
Rounds alternate the order (stock first, then ours first, ...) after one untimed warm-up run of each.
Both use one torch thread unless ``--threads`` says otherwise. Goal: step CPU ratio <= 1.03.

    .venv/bin/python benchmarks/bench_trainer_overhead.py [--steps 6] [--rounds 3] [--bf16] [--metrics-csv]
        [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from typing import Any

from machine_info import describe
from PIL import Image

MAX_COMPLETION = 16


def _rows(n: int):
    from datasets import Dataset

    colors = ["red", "green", "blue", "yellow"]
    return Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}
                ],
                "image": Image.new("RGB", (56, 56), colors[i % 4]),
            }
            for i in range(n)
        ]
    )


def _reward(prompts, completions, **kwargs):
    return [len(set(c if isinstance(c, str) else c[-1]["content"])) / 10.0 for c in completions]


def _build(kind: str, model: str, steps: int, bf16: bool, out: str) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    from r1vision.trainer import VisionGRPOConfig, VisionGRPOTrainer

    common = dict(
        per_device_train_batch_size=8, num_generations=4, max_completion_length=MAX_COMPLETION,
        max_steps=steps, logging_steps=1, use_cpu=True, report_to=[], save_strategy="no", seed=0,
        disable_tqdm=True, learning_rate=1e-4, bf16=bf16, generation_kwargs={"min_new_tokens": MAX_COMPLETION},
    )  # fmt: skip
    if kind == "stock":
        args = GRPOConfig(output_dir=out, **common)
        return GRPOTrainer(model, [_reward], args=args, train_dataset=_rows(32))
    args = VisionGRPOConfig(output_dir=out, max_pixels=56 * 56, metrics_csv=kind == "vision_csv", **common)
    return VisionGRPOTrainer(model, [_reward], args=args, train_dataset=_rows(32))


def _run(kind: str, model: str, steps: int, bf16: bool) -> dict[str, Any]:
    """Train ``steps`` steps; per-step wall/CPU (steady), whole-train wall per step, per-step inputs."""
    from transformers import TrainerCallback

    marks: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append((time.perf_counter(), time.process_time()))

    with tempfile.TemporaryDirectory() as out:
        trainer = _build(kind, model, steps, bf16, out)
        trainer.add_callback(StepClock())
        inputs: list[tuple] = []
        generate = trainer._generate_and_score_completions

        def recording(batch):  # the same thin wrapper on both trainers
            output = generate(batch)
            pixels = output.get("pixel_values")
            inputs.append(
                (
                    tuple(output["prompt_ids"].shape),
                    int(output["completion_mask"].sum()),
                    None if pixels is None else tuple(pixels.shape),
                )
            )
            return output

        trainer._generate_and_score_completions = recording
        start, start_cpu = time.perf_counter(), time.process_time()
        trainer.train()
        whole = (time.perf_counter() - start) / steps
        whole_cpu = (time.process_time() - start_cpu) / steps
    return {
        "step_wall": [b[0] - a[0] for a, b in itertools.pairwise(marks)],
        "step_cpu": [b[1] - a[1] for a, b in itertools.pairwise(marks)],
        "whole": whole,
        "whole_cpu": whole_cpu,
        "inputs": inputs,
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Pooled steady steps of all rounds (CPU median and lower quartile), best round for wall times."""
    cpu = [t for r in runs for t in r["step_cpu"]]
    return {
        "cpu_median": statistics.median(cpu),
        "cpu_p25": _quantile(cpu, 0.25),
        "wall": min(statistics.median(r["step_wall"]) for r in runs),
        "whole": min(r["whole"] for r in runs),
        "whole_cpu": min(r["whole_cpu"] for r in runs),
        "steps": len(cpu),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bf16", action="store_true", help="both trainers in bf16 (default: both float32)")
    p.add_argument(
        "--metrics-csv",
        action="store_true",
        help="also time VisionGRPOTrainer with metrics.csv on (its default)",
    )
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch intra-op threads for both (default 1: on a shared machine more threads than idle cores "
        "make single steps vary by 10x, which no number of rounds averages out)",
    )  # fmt: skip
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.steps < 2:
        p.error("--steps must be at least 2 (steady steps are the ones after the first)")
    import torch

    torch.set_num_threads(a.threads)
    import r1vision  # noqa: F401  (registers the image-only processors for the stock trainer too)
    from r1vision.testing.tiny import tiny_model_path

    model = str(tiny_model_path("qwen2_vl"))
    kinds = ["stock", "vision"] + (["vision_csv"] if a.metrics_csv else [])
    load_start = describe()
    for kind in kinds:  # untimed: first-use costs in this process (lazy imports, allocator) hit no one
        _run(kind, model, 2, a.bf16)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(a.rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            runs[kind].append(_run(kind, model, a.steps, a.bf16))
    seen = {k: runs[k][0]["inputs"] for k in kinds}
    same = all(seen[k] == seen["stock"] for k in kinds)
    summary = {k: _summary(runs[k]) for k in kinds}
    base = summary["stock"]
    names = {
        "stock": "trl.GRPOTrainer (baseline)",
        "vision": "VisionGRPOTrainer",
        "vision_csv": "VisionGRPOTrainer + metrics.csv",
    }
    print(f"start: {load_start}")
    print(f"end:   {describe()}")
    print(
        f"{a.rounds} alternating rounds x {a.steps} steps, {'bf16' if a.bf16 else 'float32'} for both, "
        f"{MAX_COMPLETION} completion tokens each, {a.threads} torch thread(s); per-step inputs identical: {same} "
        f"(prompt ids, completion tokens, pixel_values of step 1: {seen['stock'][0]}). Step CPU: process CPU "
        f"time of the {base['steps']} steady steps of all rounds pooled; wall: best round"
    )
    keys = ("cpu_median", "cpu_p25", "wall", "whole", "whole_cpu")
    print(
        "| trainer | step CPU s (median) | ratio | step CPU s (p25) | ratio | step wall s | ratio "
        "| train() wall s/step | ratio | train() CPU s/step | ratio |"
    )
    print("|---|" + "---|---|" * len(keys))
    for kind in kinds:
        cells = " | ".join(f"{summary[kind][k]:.4f} | {summary[kind][k] / base[k]:.3f}" for k in keys)
        print(f"| {names[kind]} | {cells} |")
    print("goal: VisionGRPOTrainer step CPU ratio <= 1.03")
    if not same:
        print("WARNING: the trainers saw different per-step inputs; the ratio is not overhead alone")
        for kind in kinds:
            print(f"  {kind}: {seen[kind]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "stock_s_per_step": base["cpu_median"],
                    "vision_s_per_step": summary["vision"]["cpu_median"],
                    "ratio": summary["vision"]["cpu_median"] / base["cpu_median"],
                    "same_inputs": same,
                    "summary": summary,
                },
                f,
            )


if __name__ == "__main__":
    main()
