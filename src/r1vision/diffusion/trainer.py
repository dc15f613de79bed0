"""``DiffusionGRPOTrainer``: Flow-GRPO for flow-matching text-to-image models, as a ``transformers.Trainer``.

TRL has no diffusion trainer any more (DDPO/AlignProp were removed), so this one follows TRL's conventions
instead: a config dataclass with TRL's names, reward callables with weights, ``metrics.csv`` and r1vision's
callbacks, and everything ``Trainer`` gives (optimizer, scheduler, gradient accumulation and clipping,
accelerate/DeepSpeed, checkpoints that resume exactly, ``report_to``).

One training step (``training_step``): sample ``num_generations`` images per prompt with the SDE policy
(recording every transition and its log-density), score them (the rewards run concurrently), compute
group-relative advantages, then for each trained transition replay it under the current weights and
back-propagate Flow-GRPO's loss: ``max(-A r, -A clip(r, 1 +- epsilon))`` plus ``beta`` times the KL to the same
model with its LoRA adapter switched off. ``evaluate()`` samples the evaluation prompts deterministically
(ODE, ``eval_num_inference_steps``, fixed seeds) with the EMA weights, writes ``eval_metrics.csv``, a
contact sheet and keeps the best adapter.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

from r1vision.diffusion.advantages import group_advantages
from r1vision.diffusion.config import DiffusionGRPOConfig
from r1vision.diffusion.ema import EMA
from r1vision.diffusion.families import Conditioning, load_family, to_pil
from r1vision.diffusion.rollout import Rollout, replay, rollout, sde_window
from r1vision.diffusion.sde import latent_kl

logger = logging.getLogger(__name__)
EMA_FILE = "ema.pt"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


class DiffusionGRPOTrainer(Trainer):
    """Flow-GRPO on a diffusers pipeline (see the module docstring).

    Args:
        model: a diffusers pipeline folder or Hub id (SD3/SD3.5 today).
        reward_funcs: callables ``f(prompts, images, **columns) -> list[float | None]``.
        args: :class:`DiffusionGRPOConfig`.
        train_dataset / eval_dataset: rows with a ``prompt`` column (other columns reach the rewards).
    """

    def __init__(
        self,
        model: str,
        reward_funcs: Callable | Sequence[Callable],
        args: DiffusionGRPOConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        callbacks: list | None = None,
        **kwargs: Any,
    ) -> None:
        args = args or DiffusionGRPOConfig(output_dir="outputs/t2i-grpo")
        self.reward_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        self.reward_names = [_name(f) for f in self.reward_funcs]
        weights = args.reward_weights or [1.0] * len(self.reward_funcs)
        if len(weights) != len(self.reward_funcs):
            raise ValueError(
                f"reward_weights has {len(weights)} value(s) for {len(self.reward_funcs)} reward(s)"
            )
        self.reward_weights = torch.tensor(weights, dtype=torch.float32)
        # Frozen text encoders in the mixed-precision dtype (bf16: T5-XXL 9.5 GB instead of 19 in fp32).
        frozen = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
        self.family = load_family(str(model), dtype=_DTYPES[args.denoiser_dtype], frozen_dtype=frozen,
                                  max_sequence_length=args.max_sequence_length)  # fmt: skip
        self.family.pipe.to(args.device)
        denoiser = self.family.transformer
        if getattr(args, "denoiser_checkpointing", False):
            denoiser.enable_gradient_checkpointing()
        if args.lora_r > 0:
            from peft import LoraConfig, get_peft_model
            from transformers import set_seed

            # the adapter's gaussian init draws from the global RNG, before Trainer seeds it: seeded here, a
            # run's adapter depends on args.seed, not on what the process did before (two trainers in one
            # process started from different adapters)
            set_seed(args.seed)
            denoiser.requires_grad_(False)
            lora = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, init_lora_weights="gaussian",
                              target_modules=list(args.lora_target_modules))  # fmt: skip
            denoiser = get_peft_model(denoiser, lora)
        self.model_path = str(model)
        callbacks = list(callbacks or [])
        if getattr(args, "metrics_csv", True):
            from r1vision.trainer.metrics_csv import MetricsCSVCallback

            callbacks.append(MetricsCSVCallback(os.path.join(args.output_dir, "metrics.csv")))
        super().__init__(model=denoiser, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                         data_collator=_rows, callbacks=callbacks, **kwargs)  # fmt: skip
        self.ema = (
            EMA(self.model.parameters(), args.ema_decay, args.ema_update_interval) if args.ema else None
        )
        self.add_callback(_EMAStep(self))
        self._metrics: dict[str, list[float]] = defaultdict(list)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self.reward_funcs)), thread_name_prefix="reward"
        )
        self._best_eval: float | None = None
        from r1vision.trainer.logline import use_compact_log

        use_compact_log(self)

    # ------------------------------------------------------------------------------------------- rollout
    def _generator(self, step: int, micro: int) -> torch.Generator:
        """Noise for this step from the seed, the step and the process: a resumed run samples the same."""
        seed = (
            self.args.seed * 1_000_003 + step * 1009 + micro * 31 + self.accelerator.process_index
        ) % 2**63
        return torch.Generator().manual_seed(seed)

    def _submit_rewards(
        self, prompts: list[str], images: list[Any], rows: list[dict[str, Any]]
    ) -> list[Future]:
        """Start every reward on these images in the pool (they run while the caller samples the next batch);
        each future gives ``(values, seconds)``."""
        columns = {k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"} if rows else {}

        def call(func: Callable) -> tuple[list, float]:
            start = time.perf_counter()
            out = func(prompts=prompts, images=images, **columns)
            return out, time.perf_counter() - start

        return [self._pool.submit(call, f) for f in self.reward_funcs]

    def _collect_rewards(self, futures: list[Future], n: int) -> tuple[torch.Tensor, float]:
        """(samples, rewards) with NaN where a reward returned None, and the seconds the rewards ran."""
        values = torch.full((n, len(self.reward_funcs)), math.nan)
        busy = 0.0
        for j, future in enumerate(futures):
            out, seconds = future.result()
            busy += seconds
            if len(out) != n:
                raise ValueError(f"reward {self.reward_names[j]} returned {len(out)} values for {n} images")
            values[:, j] = torch.tensor([math.nan if v is None else float(v) for v in out])
        return values, busy

    # ----------------------------------------------------------------------------------------- training
    def training_step(
        self, model: Any, inputs: list[dict[str, Any]], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        args, family = self.args, self.family
        group = args.num_generations
        prompts = [str(r["prompt"]) for r in inputs]
        rows = [r for r in inputs for _ in range(group)]
        expanded = [p for p in prompts for _ in range(group)]
        unwrapped = self.accelerator.unwrap_model(model)
        generator = self._generator(self.state.global_step, len(self._metrics["rollout_s"]))
        guided = args.guidance_scale > 1.0
        start = time.perf_counter()
        cond = family.encode(prompts, guidance=guided).repeat(group)
        window = sde_window(args.num_inference_steps, args.sde_window_size,
                            tuple(args.sde_window_range) if args.sde_window_range else None, generator)  # fmt: skip
        was_training = unwrapped.training
        unwrapped.eval()
        # Sample in batches of rollout_batch_size images; each batch's rewards run in the pool while the next
        # batch is sampled (Flow-GRPO's executor), so only the last batch's rewards are waited for.
        size = args.rollout_batch_size or len(expanded)
        parts, pending = [], []
        rollout_s = time.perf_counter() - start  # prompt encoding counts as sampling
        for low in range(0, len(expanded), size):
            rows_ = torch.arange(low, min(low + size, len(expanded)))
            tick = time.perf_counter()
            part = rollout(family, unwrapped, cond.select(rows_), steps=args.num_inference_steps,
                           resolution=args.resolution, guidance_scale=args.guidance_scale,
                           noise_level=args.noise_level, kind=args.sde_kind, window=window, generator=generator,
                           group_size=group if args.same_latent else None)  # fmt: skip
            rollout_s += time.perf_counter() - tick
            parts.append(part)
            span = slice(low, low + len(rows_))
            pending.append(
                (self._submit_rewards(expanded[span], to_pil(part.images), rows[span]), len(rows_))
            )
        unwrapped.train(was_training)
        roll = Rollout.cat(parts)
        tick = time.perf_counter()
        collected = [self._collect_rewards(futures, n) for futures, n in pending]
        values = torch.cat([v for v, _ in collected])
        reward_s = time.perf_counter() - tick  # the reward time not hidden behind sampling
        reward_busy_s = sum(b for _, b in collected)
        weighted = (values * self.reward_weights).nansum(dim=1)
        weighted[torch.isnan(values).all(dim=1)] = math.nan
        advantages, stats = group_advantages(expanded, torch.nan_to_num(weighted, nan=0.0), args.scale_rewards,
                                             args.adv_clip_max)  # fmt: skip
        advantages[torch.isnan(weighted)] = 0.0  # no reward, no signal
        keep = (
            torch.nonzero(advantages != 0).flatten()
            if args.drop_zero_advantage
            else torch.arange(len(expanded))
        )
        trained = roll.sde_steps[: max(1, int(len(roll.sde_steps) * args.timestep_fraction))]
        if args.sde_kind == "ode" or args.noise_level == 0:
            trained = []
        policy_loss = kl_total = clipfrac = approx_kl = parity = 0.0
        scale = max(len(trained), 1) * args.gradient_accumulation_steps
        if len(keep) and trained:
            sub = cond.select(keep)
            adv = advantages[keep].to(family.device)
            old = roll.log_probs[keep].to(family.device)
            for j in trained:
                step = replay(family, model, sub, roll, j, guidance_scale=args.guidance_scale,
                              noise_level=args.noise_level, kind=args.sde_kind, rows=keep)  # fmt: skip
                ratio = torch.exp(step.log_prob - old[:, j])
                clipped = torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon)
                loss = torch.maximum(-adv * ratio, -adv * clipped).mean()
                if args.beta > 0:
                    kl = self._kl(unwrapped, sub, roll, j, keep, step).mean()
                    loss = loss + args.beta * kl
                    kl_total += float(kl.detach())
                self.accelerator.backward(loss / scale)
                policy_loss += float(loss.detach())
                delta = (step.log_prob - old[:, j]).detach()
                parity = max(parity, float(delta.abs().max()))  # the weights have not moved within this step
                clipfrac += float(((ratio - 1).abs() > args.epsilon).float().mean())
                approx_kl += float(0.5 * (delta**2).mean())
        else:  # keep every process's backward in step (DDP / ZeRO all-reduce on every micro step)
            self.accelerator.backward(sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad))
        train_s = time.perf_counter() - tick - reward_s
        n = max(len(trained), 1)
        self._record(weighted, values, stats, rollout_s=rollout_s, reward_s=reward_s, reward_busy_s=reward_busy_s,
                     train_s=train_s,
                     policy_loss=policy_loss / n, kl=kl_total / n, clipfrac=clipfrac / n, approx_kl=approx_kl / n,
                     logprob_parity_max=parity, images_per_s=len(expanded) / max(rollout_s, 1e-9),
                     trained_samples=float(len(keep)))  # fmt: skip
        return torch.tensor(policy_loss / n + args.beta * kl_total / n, device=self.args.device)

    def _kl(
        self, unwrapped: Any, cond: Conditioning, roll: Any, j: int, keep: torch.Tensor, step: Any
    ) -> torch.Tensor:
        """KL of transition ``j`` to the reference: the adapter switched off (LoRA), else zero."""
        if not hasattr(unwrapped, "disable_adapter"):
            return torch.zeros(len(keep), device=self.family.device)
        with torch.no_grad(), unwrapped.disable_adapter():
            ref = replay(self.family, unwrapped, cond, roll, j, guidance_scale=self.args.guidance_scale,
                         noise_level=self.args.noise_level, kind=self.args.sde_kind, rows=keep)  # fmt: skip
        return latent_kl(step.mean, ref.mean, step.std)

    def _record(
        self, weighted: torch.Tensor, values: torch.Tensor, stats: dict[str, float], **scalars: float
    ) -> None:
        finite = weighted[~torch.isnan(weighted)]
        self._metrics["reward"].append(float(finite.mean()) if len(finite) else math.nan)
        self._metrics["reward_std"].append(float(finite.std(unbiased=False)) if len(finite) else math.nan)
        for j, name in enumerate(self.reward_names):
            column = values[:, j][~torch.isnan(values[:, j])]
            self._metrics[f"rewards/{name}/mean"].append(float(column.mean()) if len(column) else math.nan)
        self._metrics["frac_reward_zero_std"].append(stats["zero_std_ratio"])
        self._metrics["adv_zero_rate"].append(stats["adv_zero_rate"])
        self._metrics["group_size"].append(stats["group_size"])
        for key, value in scalars.items():
            self._metrics[key].append(float(value))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL-style: the step metrics averaged since the last log join transformers' loss, lr and grad norm."""
        if self._metrics and not any(k.startswith("eval_") for k in logs):
            for key, series in self._metrics.items():
                finite = [v for v in series if not math.isnan(v)]
                logs[key] = sum(finite) / len(finite) if finite else math.nan
            self._metrics.clear()
        super().log(logs, start_time)

    # ----------------------------------------------------------------------------------------- evaluate
    @torch.no_grad()
    def generate(self, prompts: list[str], steps: int, seed: int, use_ema: bool = True) -> list[Any]:
        """Deterministic images (ODE, fixed seeds: image ``i`` from ``seed + i``) for ``prompts``."""
        model = self.accelerator.unwrap_model(self.model)
        context = self.ema.swapped() if use_ema and self.ema is not None else _null()
        images = []
        with context:
            model.eval()
            for i, prompt in enumerate(prompts):
                cond = self.family.encode([prompt], guidance=self.args.guidance_scale > 1.0)
                roll = rollout(self.family, model, cond, steps=steps, resolution=self.args.resolution,
                               guidance_scale=self.args.guidance_scale, noise_level=0.0, kind="ode",
                               generator=torch.Generator().manual_seed(seed + i))  # fmt: skip
                images += to_pil(roll.images)
            model.train()
        return images

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval"
    ) -> dict:
        """Flow-GRPO's evaluation: the eval prompts, ODE, ``eval_num_inference_steps``, fixed seeds, EMA weights.
        Writes ``eval_metrics.csv``, ``eval/step-N/contact_sheet.png`` and, when the reward improved, ``best/``."""
        from r1vision.diffusion.evaluate import contact_sheet, score_images

        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            return {}
        rows = [dataset[i] for i in range(min(self.args.eval_num_images, len(dataset)))]
        prompts = [str(r["prompt"]) for r in rows]
        images = self.generate(prompts, self.args.eval_num_inference_steps, self.args.eval_seed)
        metrics, captions = score_images(
            self.reward_funcs, self.reward_weights.tolist(), prompts, images, rows
        )
        step = self.state.global_step
        out = {f"{metric_key_prefix}_{k}": v for k, v in metrics.items()}
        if self.is_world_process_zero():
            folder = Path(self.args.output_dir) / "eval" / f"step-{step}"
            contact_sheet(images, captions, folder / "contact_sheet.png")
            _append_csv(Path(self.args.output_dir) / "eval_metrics.csv", {"step": step, **metrics})
            if self._best_eval is None or metrics["reward"] > self._best_eval:
                self._best_eval = metrics["reward"]
                self._export(Path(self.args.output_dir) / "best", ema=True)
                (Path(self.args.output_dir) / "best" / "eval.json").write_text(
                    json.dumps({"step": step, **metrics})
                )
        self.log(out)
        return out

    # ------------------------------------------------------------------------------------------- saving
    def _export(self, folder: Path, ema: bool) -> None:
        """The adapter (EMA weights with ``ema``) as a diffusers LoRA folder, or the full denoiser."""
        from r1vision.diffusion.export import save_lora

        model = self.accelerator.unwrap_model(self.model)
        context = self.ema.swapped() if ema and self.ema is not None else _null()
        with context:
            if hasattr(model, "peft_config"):
                save_lora(model, folder)
            else:
                model.save_pretrained(folder / "transformer")

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        if _internal_call or not self.args.should_save:
            return
        target = Path(output_dir or self.args.output_dir)
        self._export(target / "lora", ema=False)
        if self.ema is not None:
            self._export(target / "lora_ema", ema=True)
        settings = {"kind": "t2i-grpo", "base_model": os.path.abspath(self.model_path)
                    if os.path.isdir(self.model_path) else self.model_path, "family": self.family.name,
                    "rewards": dict(zip(self.reward_names, self.reward_weights.tolist(), strict=True)),
                    "lora_r": self.args.lora_r, "lora_alpha": self.args.lora_alpha, "resolution": self.args.resolution,
                    "num_inference_steps": self.args.num_inference_steps,
                    "eval_num_inference_steps": self.args.eval_num_inference_steps,
                    "guidance_scale": self.args.guidance_scale, "noise_level": self.args.noise_level}  # fmt: skip
        (target / "r1vision_run.json").write_text(json.dumps(settings, indent=2, sort_keys=True))

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.ema is not None and self.args.should_save:
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            torch.save(self.ema.state_dict(), folder / EMA_FILE)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        ema_file = Path(resume_from_checkpoint) / EMA_FILE
        if self.ema is not None and ema_file.is_file():
            self.ema.load_state_dict(torch.load(ema_file, map_location="cpu", weights_only=True))


class _EMAStep(TrainerCallback):
    def __init__(self, trainer: DiffusionGRPOTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102 - after each optimizer step
        if self.trainer.ema is not None:
            self.trainer.ema.step()


def _rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The collator: rows stay rows (prompts are text; the rollout makes the tensors)."""
    return batch


class _null:  # noqa: N801 - a tiny stand-in for contextlib.nullcontext with no import at call sites
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _append_csv(path: Path, row: dict[str, Any]) -> None:
    """One row appended; a new column rewrites the file with the wider header (rows are few)."""
    rows: list[dict[str, Any]] = []
    if path.is_file():
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        rows = [
            r for r in rows if int(float(r.get("step") or -1)) < int(row["step"])
        ]  # a resumed run rewrites
    rows.append({k: v for k, v in row.items()})
    header = list(dict.fromkeys(k for r in rows for k in r))
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
