"""Trainer overhead: VisionGRPOTrainer vs stock ``trl.GRPOTrainer`` on the identical tiny-VLM workload.

Both train the same tiny Qwen2-VL on the same rows (PIL images already at the budget size, so the stock
trainer gets no disadvantage from our resizing), with the same reward, seed and settings. Rounds are
interleaved and the best per-step time of each is kept, which filters out noise from other processes.
Goal: ratio <= 1.03.

    .venv/bin/python benchmarks/bench_trainer_overhead.py [--steps 6] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time

from PIL import Image


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


def _time_steps(kind: str, model: str, steps: int) -> float:
    from trl import GRPOConfig, GRPOTrainer

    from r1vision.trainer import VisionGRPOConfig, VisionGRPOTrainer

    common = dict(
        per_device_train_batch_size=8, num_generations=4, max_completion_length=16, max_steps=steps,
        logging_steps=1, use_cpu=True, report_to=[], save_strategy="no", seed=0, disable_tqdm=True,
        learning_rate=1e-4,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        if kind == "stock":
            trainer = GRPOTrainer(
                model, [_reward], args=GRPOConfig(output_dir=out, **common), train_dataset=_rows(32)
            )
        else:
            args = VisionGRPOConfig(output_dir=out, max_pixels=56 * 56, metrics_csv=False, **common)
            trainer = VisionGRPOTrainer(model, [_reward], args=args, train_dataset=_rows(32))
        start = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    import r1vision  # noqa: F401  (registers the image-only processors for the stock trainer too)
    from r1vision.testing.tiny import tiny_model_path

    model = str(tiny_model_path("qwen2_vl"))
    best = {"stock": float("inf"), "vision": float("inf")}
    for _ in range(a.rounds):
        for kind in ("stock", "vision"):
            best[kind] = min(best[kind], _time_steps(kind, model, a.steps))
    ratio = best["vision"] / best["stock"]
    print(
        f"machine: {platform.machine()} {platform.processor() or ''}, best of {a.rounds} rounds x {a.steps} steps"
    )
    print("| trainer | s/step | ratio |")
    print("|---|---|---|")
    print(f"| trl.GRPOTrainer (baseline) | {best['stock']:.3f} | 1.00 |")
    print(f"| VisionGRPOTrainer | {best['vision']:.3f} | {ratio:.3f} (goal <= 1.03) |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {"stock_s_per_step": best["stock"], "vision_s_per_step": best["vision"], "ratio": ratio}, f
            )


if __name__ == "__main__":
    main()
