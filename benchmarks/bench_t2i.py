"""Text-to-image GRPO: rollout throughput, seconds per training step and OCR latency, each against a
baseline measured in the same run (one torch thread, the tiny SD3 pipeline at 64 px; no GPU here).

- rollout: r1vision's ``rollout`` (SDE, every transition and its log-density recorded) against stock
  diffusers ``StableDiffusion3Pipeline.__call__`` (ODE, nothing recorded): same batch, steps and CFG.
- training step: ``DiffusionGRPOTrainer.training_step`` (rollout, rewards, advantages, replay + backward of
  every trained step) against a plain loop written the way Flow-GRPO's ``scripts/train_sd3.py`` works
  (sample with log-probs, score, per-prompt advantages, per-timestep forward/backward), same model and
  settings, no Trainer around it.
- OCR: rapidocr on a rendered 512x512 image and on a 160x40 text strip (per image).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_t2i.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch


def _medians(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of ``first()`` and ``second()``, timed alternately after a warm-up of each, so that
    neither gains from running first or from a quieter moment of a shared machine."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def bench_rollout(model: str, repeats: int, batch: int = 8, steps: int = 10) -> tuple[float, float]:
    from diffusers import StableDiffusion3Pipeline

    from r1vision.diffusion.families import load_family
    from r1vision.diffusion.rollout import rollout

    family = load_family(model, max_sequence_length=16)
    pipe = StableDiffusion3Pipeline.from_pretrained(model)
    prompts = ["a bright photo"] * batch

    def ours():
        cond = family.encode(prompts, guidance=True)
        rollout(family, family.transformer, cond, steps=steps, resolution=64, guidance_scale=4.5, noise_level=0.7,
                generator=torch.Generator().manual_seed(0))  # fmt: skip

    def stock():
        pipe(prompts, num_inference_steps=steps, guidance_scale=4.5, height=64, width=64, max_sequence_length=16,
             output_type="pt", generator=torch.Generator().manual_seed(0))  # fmt: skip

    ours_s, stock_s = _medians(ours, stock, repeats)
    return batch / ours_s, batch / stock_s


def bench_step(model: str, repeats: int) -> tuple[float, float]:
    """Seconds per training step: the trainer's, and a plain Flow-GRPO-style loop doing the same work."""
    from r1vision.diffusion.advantages import group_advantages
    from r1vision.diffusion.config import DiffusionGRPOConfig
    from r1vision.diffusion.data import load_prompts, synth_t2i
    from r1vision.diffusion.families import to_pil
    from r1vision.diffusion.rewards import resolve_reward
    from r1vision.diffusion.sde import sde_step
    from r1vision.diffusion.trainer import DiffusionGRPOTrainer

    folder = tempfile.mkdtemp()
    synth_t2i(folder, 8, kind="brightness")
    args = DiffusionGRPOConfig(output_dir=f"{folder}/out", num_generations=8, per_device_train_batch_size=16,
                               num_inference_steps=10, resolution=64, guidance_scale=4.5, beta=0.04, lora_r=8,
                               lora_alpha=16, use_cpu=True, save_strategy="no", disable_tqdm=True,
                               max_sequence_length=16, ema=False)  # fmt: skip
    reward = resolve_reward("prompt_brightness")
    trainer = DiffusionGRPOTrainer(model, [reward], args=args, train_dataset=load_prompts(folder))
    rows = [trainer.train_dataset[i] for i in range(2) for _ in range(8)]  # 2 prompts x 8 images
    optimizer = torch.optim.AdamW([p for p in trainer.model.parameters() if p.requires_grad], lr=1e-4)

    def ours():
        trainer.training_step(trainer.model, rows)
        optimizer.zero_grad()

    family, model_ = trainer.family, trainer.model

    def plain():  # Flow-GRPO's train_sd3.py shape: sample with log-probs, score, advantages, per-timestep loss
        prompts = [r["prompt"] for r in rows]
        embeds, neg, pooled, neg_pooled = family.pipe.encode_prompt(prompts, None, None, do_classifier_free_guidance=True,
                                                                    max_sequence_length=16)  # fmt: skip
        sigmas = family.sigmas(10)
        g = torch.Generator().manual_seed(0)
        x = torch.randn((16, 16, 8, 8), generator=g)
        lats, logps = [x], []
        with torch.no_grad():
            for i in range(10):
                out = model_(hidden_states=torch.cat([x, x]), timestep=torch.full((32,), float(sigmas[i]) * 1000),
                             encoder_hidden_states=torch.cat([neg, embeds]), pooled_projections=torch.cat([neg_pooled, pooled]),
                             return_dict=False)[0]  # fmt: skip
                u, c = out.chunk(2)
                step = sde_step(
                    u + 4.5 * (c - u), x, sigmas[i], sigmas[i + 1], sigma_max=float(sigmas[1]), generator=g
                )
                x = step.sample
                lats.append(x)
                logps.append(step.log_prob)
        images = to_pil(family.decode(x))
        adv, _ = group_advantages(prompts, torch.tensor(reward(prompts, images)), "batch")
        for i in range(9):
            out = model_(hidden_states=torch.cat([lats[i], lats[i]]), timestep=torch.full((32,), float(sigmas[i]) * 1000),
                         encoder_hidden_states=torch.cat([neg, embeds]), pooled_projections=torch.cat([neg_pooled, pooled]),
                         return_dict=False)[0]  # fmt: skip
            u, c = out.chunk(2)
            step = sde_step(u.detach() + 4.5 * (c - u.detach()), lats[i], sigmas[i], sigmas[i + 1],
                            sigma_max=float(sigmas[1]), prev=lats[i + 1])  # fmt: skip
            ratio = torch.exp(step.log_prob - logps[i])
            loss = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - 1e-4, 1 + 1e-4)).mean()
            with torch.no_grad(), model_.disable_adapter():
                ref = model_(hidden_states=torch.cat([lats[i], lats[i]]), timestep=torch.full((32,), float(sigmas[i]) * 1000),
                             encoder_hidden_states=torch.cat([neg, embeds]),
                             pooled_projections=torch.cat([neg_pooled, pooled]), return_dict=False)[0]  # fmt: skip
            ru, rc = ref.chunk(2)
            ref_step = sde_step(ru + 4.5 * (rc - ru), lats[i], sigmas[i], sigmas[i + 1], sigma_max=float(sigmas[1]),
                                prev=lats[i + 1])  # fmt: skip
            kl = ((step.mean - ref_step.mean) ** 2).mean(dim=(1, 2, 3)) / (2 * step.std**2)
            (loss + 0.04 * kl.mean()).backward()
        optimizer.zero_grad()

    return _medians(ours, plain, repeats)


def bench_ocr(repeats: int) -> tuple[float, float]:
    from PIL import Image, ImageDraw, ImageFont

    from r1vision.diffusion.rewards.ocr import RapidOCREngine

    engine = RapidOCREngine(threads=1)
    font = ImageFont.load_default(size=40)
    big = Image.new("RGB", (512, 512), "white")
    ImageDraw.Draw(big).text((40, 230), "Spring Collection", fill="black", font=font)
    strip = Image.new("RGB", (160, 40), "white")
    ImageDraw.Draw(strip).text((4, 4), "OPEN 24", fill="black", font=ImageFont.load_default(size=28))
    return _medians(lambda: engine(big), lambda: engine(strip), repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    model = str(tiny_sd3_path())
    ours_ips, stock_ips = bench_rollout(model, a.repeats)
    ours_s, plain_s = bench_step(model, a.repeats)
    big_s, strip_s = bench_ocr(a.repeats)
    print(f"torch threads 1, tiny SD3 at 64 px, median of {a.repeats}")
    print("| measurement | r1vision | baseline | ratio |")
    print("|---|---|---|---|")
    print(
        f"| rollout images/s (8 images, 10 steps, CFG 4.5) | {ours_ips:.1f} | {stock_ips:.1f} (diffusers pipeline, ODE) | {ours_ips / stock_ips:.2f}x |"
    )
    print(
        f"| training step s (2 prompts x 8, 9 trained steps, KL) | {ours_s:.3f} | {plain_s:.3f} (plain Flow-GRPO-style loop) | {plain_s / ours_s:.2f}x speed |"
    )
    print(f"| OCR s per image (rapidocr, 1 thread) | 512 px: {big_s:.3f} | strip 160x40: {strip_s:.3f} | |")


if __name__ == "__main__":
    main()
