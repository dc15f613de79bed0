"""Text-to-image GRPO at SD3.5-Medium's shapes on a GPU: random weights built from its component configs
(``r1vision/data/pipeline_shapes/sd3.5-medium.json``; no download), tokenizers from the tiny offline pipeline.

Measured in one run, each against a baseline of the same run:

- rollout images/s: r1vision's ``rollout`` (SDE, every transition and its log-density recorded) against
  stock diffusers ``StableDiffusion3Pipeline.__call__`` (ODE, nothing recorded), same images, steps, CFG 4.5;
- seconds per training step of ``DiffusionGRPOTrainer`` (rollout, reward, ``--trained`` replayed transitions
  with backward, KL 0.04, LoRA r32 on Flow-GRPO's targets, fp32 denoiser under bf16 autocast, bf16 text
  encoders, gradient checkpointing, EMA), and its peak GPU memory against ``r1vision estimate-memory`` for
  the same setup.

    python benchmarks/bench_t2i_gpu.py [--images 8 --steps 10 --trained 2 --repeats 2 --json out.json]
    python benchmarks/bench_t2i_gpu.py --cpu-smoke      # the same code on the tiny pipeline, CPU
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_t2i import _medians  # noqa: E402


def build_family(shape_name: str, device: str, frozen: torch.dtype, max_sequence_length: int) -> Any:
    """An SD3 pipeline with random weights at ``shape_name``'s shapes, built on ``device`` (denoiser and VAE
    in fp32, text encoders in ``frozen``), wrapped as r1vision's family."""
    from diffusers import StableDiffusion3Pipeline

    from r1vision.diffusion.estimate import _construct, load_shape
    from r1vision.diffusion.families import SD3Family
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    shape = load_shape(shape_name)
    tiny = StableDiffusion3Pipeline.from_pretrained(str(tiny_sd3_path()))  # tokenizers and scheduler
    parts: dict[str, Any] = {}
    previous = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        for part in ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"):
            torch.set_default_dtype(torch.float32 if part in ("transformer", "vae") else frozen)
            with torch.device(device):
                parts[part] = _construct(part, shape[part])
    finally:
        torch.set_default_dtype(previous)
    if (
        parts["vae"].config.get("shift_factor") is None
    ):  # the shapes file keeps shape fields only: SD3.5's values
        parts["vae"].register_to_config(scaling_factor=1.5305, shift_factor=0.0609)
    pipe = StableDiffusion3Pipeline(
        scheduler=tiny.scheduler, tokenizer=tiny.tokenizer, tokenizer_2=tiny.tokenizer_2, tokenizer_3=tiny.tokenizer_3,
        **parts,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return SD3Family(pipe, decode="vae", max_sequence_length=max_sequence_length)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run(a: argparse.Namespace) -> dict[str, Any]:
    import r1vision.diffusion.trainer as trainer_module
    from r1vision.diffusion.config import DiffusionGRPOConfig
    from r1vision.diffusion.data import load_prompts, synth_t2i
    from r1vision.diffusion.estimate import T2ISetup, t2i_memory_report
    from r1vision.diffusion.families import SD3_LORA_TARGETS
    from r1vision.diffusion.rewards import resolve_reward
    from r1vision.diffusion.rollout import rollout

    gpu = torch.cuda.is_available() and not a.cpu_smoke
    device = "cuda" if gpu else "cpu"
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 work outside autocast (SDE math) as Flow-GRPO
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    shape = "sd3.5-medium" if gpu else str(tiny_sd3_path())
    t0 = time.perf_counter()
    family = build_family(shape, device, torch.bfloat16 if gpu else torch.float32, a.max_sequence_length)
    build_s = time.perf_counter() - t0
    prompts = ["a bright photo of a lighthouse"] * a.images

    # rollout vs stock pipeline, both on the plain denoiser (before the trainer adds LoRA)
    def ours() -> None:
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=gpu):
            cond = family.encode(prompts, guidance=True)
            rollout(family, family.transformer, cond, steps=a.steps, resolution=a.resolution, guidance_scale=4.5,
                    noise_level=0.7, generator=torch.Generator().manual_seed(0))  # fmt: skip
        _sync()

    def stock() -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=gpu):
            family.pipe(prompts, num_inference_steps=a.steps, guidance_scale=4.5, height=a.resolution,
                        width=a.resolution, max_sequence_length=a.max_sequence_length, output_type="pt",
                        generator=torch.Generator(device).manual_seed(0))  # fmt: skip
        _sync()

    ours_s, stock_s = _medians(ours, stock, a.repeats)

    # training steps through the trainer, on the family built above
    folder = Path(tempfile.mkdtemp())
    synth_t2i(folder, 4, kind="brightness")
    args = DiffusionGRPOConfig(
        output_dir=str(folder / "out"), num_generations=a.images, per_device_train_batch_size=a.images,
        num_inference_steps=a.steps, timestep_fraction=a.trained / a.steps, resolution=a.resolution,
        guidance_scale=4.5, beta=0.04, lora_r=32, lora_alpha=64, bf16=gpu, use_cpu=not gpu,
        gradient_checkpointing=a.checkpointing, save_strategy="no", disable_tqdm=True, report_to=[], ema=True,
        max_sequence_length=a.max_sequence_length, drop_zero_advantage=False,
    )  # fmt: skip
    original = trainer_module.load_family
    trainer_module.load_family = lambda *args_, **kw: family
    try:
        trainer = trainer_module.DiffusionGRPOTrainer("in-memory", [resolve_reward("brightness")], args=args,
                                                      train_dataset=load_prompts(folder))  # fmt: skip
    finally:
        trainer_module.load_family = original
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    row = [trainer.train_dataset[0]] * a.images  # one group: a.images images of one prompt
    shutil.rmtree(folder)  # the prompts are loaded and nothing is saved: leave no folder behind per run
    times, peaks = [], []
    for i in range(a.repeats + 1):
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        _sync()
        start = time.perf_counter()
        trainer.training_step(trainer.model, row)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        _sync()
        if i:  # the first step warms up
            times.append(time.perf_counter() - start)
            if gpu:
                peaks.append(torch.cuda.max_memory_allocated())
    setup = T2ISetup(resolution=a.resolution, batch=a.images, rollout_images=a.images, steps=a.steps,
                     guidance=True, lora_r=32, lora_targets=tuple(SD3_LORA_TARGETS), denoiser_dtype="float32",
                     bf16=gpu, gradient_checkpointing=a.checkpointing, ema=True)  # fmt: skip
    estimate = t2i_memory_report("sd3.5-medium", setup)
    metrics = trainer._metrics
    return {
        "device": torch.cuda.get_device_name() if gpu else "cpu (smoke: tiny pipeline)",
        "torch": torch.__version__,
        "images": a.images,
        "checkpointing": a.checkpointing,
        "steps": a.steps,
        "trained": a.trained,
        "resolution": a.resolution,
        "build_s": build_s,
        "rollout_images_per_s": a.images / ours_s,
        "stock_images_per_s": a.images / stock_s,
        "train_step_s": statistics.median(times),
        "rollout_s_in_step": statistics.median(metrics["rollout_s"][1:] or metrics["rollout_s"]),
        "train_s_in_step": statistics.median(metrics["train_s"][1:] or metrics["train_s"]),
        "logprob_parity_max": max(metrics["logprob_parity_max"]),
        "peak_allocated_gib": max(peaks) / 2**30 if peaks else None,
        "estimate_peak_gib": estimate["peak"] / 2**30,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=8, help="images per step (one prompt's group)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--trained", type=int, default=2, help="transitions replayed with backward per step")
    p.add_argument("--resolution", type=int, default=512)
    p.add_argument("--max-sequence-length", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--no-checkpointing",
        dest="checkpointing",
        action="store_false",
        help="train without gradient checkpointing (Flow-GRPO's 80 GB setting)",
    )
    p.add_argument("--cpu-smoke", action="store_true", help="tiny pipeline on the CPU (checks the code path)")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.cpu_smoke:
        a.images, a.steps, a.trained, a.resolution, a.repeats, a.max_sequence_length = 4, 2, 1, 64, 1, 16
        torch.set_num_threads(1)
    r = run(a)
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))
    print(
        f"{r['device']}, torch {r['torch']}: {r['images']} images, {r['steps']} steps, CFG 4.5, {r['resolution']} px"
    )
    print("| measurement | r1vision | baseline | ratio |")
    print("|---|---|---|---|")
    print(f"| rollout images/s | {r['rollout_images_per_s']:.2f} | {r['stock_images_per_s']:.2f} (diffusers pipeline, "
          f"ODE) | {r['rollout_images_per_s'] / r['stock_images_per_s']:.2f}x |")  # fmt: skip
    print(f"| training step s ({r['trained']} transitions trained, KL, EMA) | {r['train_step_s']:.2f} (rollout "
          f"{r['rollout_s_in_step']:.2f}, train {r['train_s_in_step']:.2f}) | | |")  # fmt: skip
    if r["peak_allocated_gib"] is not None:
        print(f"| peak GPU memory GiB (allocated) | {r['peak_allocated_gib']:.1f} | estimate {r['estimate_peak_gib']:.1f} "
              f"| {r['peak_allocated_gib'] / r['estimate_peak_gib']:.2f}x |")  # fmt: skip
    print(
        f"log-prob parity (rollout vs replay, max): {r['logprob_parity_max']:.2e}; build {r['build_s']:.0f} s"
    )


if __name__ == "__main__":
    main()
