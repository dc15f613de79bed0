"""``r1vision demo``: the embedded SFT → GRPO run on offline data, with a before/after table.

Everything is built locally: a tiny Qwen2-VL-style model, synthetic ``color`` data, SFT, evaluation,
GRPO from the SFT checkpoint, evaluation again. Outputs go to ``demo_out/``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path


def _evaluate(task, model: str, data: Path, out: Path, max_pixels: int) -> dict[str, float]:
    from r1vision.generation.hf import SamplingOptions
    from r1vision.generation.infer import run_inference
    from r1vision.tasks.base import evaluate_files

    run_inference(
        task,
        model,
        str(data),
        out,
        split="test",
        batch_size=16,
        options=SamplingOptions(max_new_tokens=12),
        max_pixels=max_pixels,
        progress=False,
    )
    return evaluate_files(task, str(data), str(out), split="test").metrics


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; prints the table and writes ``demo_out/``."""
    from r1vision.recipes import ScriptArguments, run_grpo, run_sft
    from r1vision.tasks import get_task
    from r1vision.testing.tiny import tiny_model_path
    from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

    p = argparse.ArgumentParser(prog="r1vision demo", description="Offline SFT -> GRPO demo.")
    p.add_argument("--out", default="demo_out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a smoke run of well under a minute")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    n_train, n_test = (32, 16) if a.quick else (256, 64)
    sft_steps, grpo_steps = (4, 2) if a.quick else (60, 20)
    max_pixels = 56 * 56

    task = get_task("color")
    data = out / "data"
    task.synth(data, n_train, seed=a.seed, split="train")
    task.synth(data, n_test, seed=a.seed, split="test")
    print(f"[1/5] data: {n_train} train / {n_test} test rows in {data}", flush=True)
    base = str(tiny_model_path("qwen2_vl", seed=a.seed, hidden=64, layers=2))
    print(f"[2/5] tiny model: {base}", flush=True)

    common = dict(
        report_to=[],
        use_cpu=True,
        seed=a.seed,
        logging_steps=1,
        save_strategy="no",
        max_pixels=max_pixels,
        disable_tqdm=False,
    )
    sft_dir = str(out / "sft")
    run_sft(
        ScriptArguments(model=base, dataset=str(data), task="color"),
        VisionSFTConfig(
            output_dir=sft_dir,
            max_steps=sft_steps,
            per_device_train_batch_size=8,
            learning_rate=2e-3,
            lr_scheduler_type="cosine",
            **common,
        ),
    )
    sft_metrics = _evaluate(task, sft_dir, data, out / "pred_sft", max_pixels)
    print(f"[3/5] SFT done: accuracy {sft_metrics.get('reward/accuracy', 0):.3f}", flush=True)

    grpo_dir = str(out / "grpo")
    run_grpo(
        ScriptArguments(model=sft_dir, dataset=str(data), task="color"),
        VisionGRPOConfig(
            output_dir=grpo_dir,
            max_steps=grpo_steps,
            per_device_train_batch_size=8,
            num_generations=8,
            max_completion_length=12,
            learning_rate=3e-4,
            beta=0.0,
            temperature=1.0,
            **common,
        ),
    )
    grpo_metrics = _evaluate(task, grpo_dir, data, out / "pred_grpo", max_pixels)
    print("[4/5] GRPO done", flush=True)

    keys = sorted(set(sft_metrics) | set(grpo_metrics))
    table = ["| metric | SFT | SFT + GRPO |", "|---|---|---|"]
    table += [
        f"| {k} | {sft_metrics.get(k, float('nan')):.3f} | {grpo_metrics.get(k, float('nan')):.3f} |"
        for k in keys
    ]
    (out / "eval_table.md").write_text("\n".join(table) + "\n")
    (out / "eval.json").write_text(json.dumps({"sft": sft_metrics, "sft+grpo": grpo_metrics}, indent=2))
    print("[5/5] held-out evaluation (color task):\n" + "\n".join(table))
    print(
        f"\ndemo finished in {time.time() - start:.0f}s; outputs in {out}/ (metrics.csv under sft/ and grpo/)"
    )
    return 0
