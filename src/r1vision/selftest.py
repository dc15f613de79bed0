"""``r1vision selftest``: check this environment before a long run (the role ``accelerate test`` plays)."""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path


def _check(name: str, fn: Callable[[], str]) -> bool:
    start = time.time()
    try:
        detail = fn()
        print(f"PASS  {name:28s} {detail} ({time.time() - start:.1f}s)", flush=True)
        return True
    except Exception as exc:
        print(f"FAIL  {name:28s} {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc()
        return False


def _versions() -> str:
    from r1vision.versions import check_versions

    rows = check_versions()
    bad = [f"{n} {have} (tested {want})" for n, have, want, ok in rows if not ok]
    if bad:
        raise RuntimeError("outside the tested matrix: " + ", ".join(bad))
    return ", ".join(f"{n} {have}" for n, have, _, _ in rows)


def _devices() -> str:
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return f"{len(names)} CUDA device(s): {', '.join(names)}"
    return f"CPU only ({torch.get_num_threads()} threads)"


def _processor(workdir: Path, family: str) -> str:
    from transformers import AutoProcessor

    from r1vision.testing.tiny import tiny_model_path

    path = tiny_model_path(family, cache_dir=workdir / "models")
    processor = AutoProcessor.from_pretrained(path)
    if not hasattr(processor, "image_processor"):
        raise RuntimeError(f"AutoProcessor returned {type(processor).__name__}, not a processor with images")
    return type(processor).__name__


def _grpo(workdir: Path, family: str, layout: str) -> str:
    import math

    from r1vision.tasks import get_task
    from r1vision.testing.tiny import tiny_model_path
    from r1vision.trainer.config import VisionGRPOConfig
    from r1vision.trainer.grpo import VisionGRPOTrainer

    if layout != "single":
        raise RuntimeError(f"layout {layout!r} is not available in this version (only 'single')")
    task = get_task("color")
    task.synth(workdir / "data", 8, seed=0)
    dataset = task.load(workdir / "data").remove_columns(["completion"])
    model = tiny_model_path(family, cache_dir=workdir / "models")
    args = VisionGRPOConfig(
        output_dir=str(workdir / "grpo"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        max_pixels=56 * 56,
        learning_rate=1e-3,
    )

    def length_reward(prompts, completions, **kwargs):
        return [min(len(str(c)), 50) / 50 for c in completions]

    trainer = VisionGRPOTrainer(str(model), [length_reward], args=args, train_dataset=dataset)
    out = trainer.train()
    if not math.isfinite(out.training_loss):
        raise RuntimeError(f"loss is not finite: {out.training_loss}")
    return f"2 steps, loss {out.training_loss:.4f}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks; exit code 0 only if all pass."""
    p = argparse.ArgumentParser(prog="r1vision selftest", description="Check this environment end to end.")
    p.add_argument("--layout", default="single", choices=["single"], help="training layout to exercise")
    p.add_argument("--family", default="qwen2_vl", choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="r1vision-selftest-") as tmp:
        work = Path(tmp)
        results = [
            _check("versions", _versions),
            _check("devices", _devices),
            _check(f"processor ({a.family})", lambda: _processor(work, a.family)),
            _check(f"grpo 2 steps ({a.layout})", lambda: _grpo(work, a.family, a.layout)),
        ]
    ok = all(results)
    print(
        f"\nselftest: {sum(results)}/{len(results)} checks passed" + ("" if ok else " — see FAIL lines above")
    )
    return 0 if ok else 1
