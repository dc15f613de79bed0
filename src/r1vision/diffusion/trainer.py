"""``DiffusionGRPOTrainer``: Flow-GRPO for flow-matching text-to-image models, as a ``transformers.Trainer``.

TRL has no diffusion trainer any more (DDPO/AlignProp were removed), so this one follows TRL's conventions
instead: a config dataclass with TRL's names, reward callables with weights, TRL's generation batch
(``per_device_train_batch_size`` images per process and micro-step, one rollout every
``steps_per_generation`` micro-steps), ``metrics.csv`` and r1vision's callbacks, and everything ``Trainer``
gives (optimizer, scheduler, gradient accumulation and clipping, accelerate/DeepSpeed, checkpoints that
resume exactly, ``report_to``).

One generation (Flow-GRPO's epoch): every process samples its share of the generation batch with the SDE
policy (recording every transition and its log-density), scores it (the rewards run concurrently with the
next sampling batch), and the rewards of all processes are gathered so that group-relative advantages are
Flow-GRPO's per-prompt statistics over the whole step (a group may span processes). The samples are
shuffled and split over the ``steps_per_generation`` micro-steps; with ``steps_per_generation = 2 x
gradient_accumulation_steps`` (Flow-GRPO's recipes) the second update trains on samples drawn before the
first one, so PPO's clip acts. Each micro-step replays its samples' trained transitions under the current
weights and back-propagates ``max(-A r, -A clip(r, 1 +- epsilon))`` plus ``beta`` times Flow-GRPO's KL to the
model with its LoRA adapter switched off.

Several processes: every process runs the same forwards and backwards whatever its rewards (a process whose
samples all have zero advantage replays one sample with weight 0), the transitions of one micro-step are
accumulated locally and reduced once, and under DeepSpeed one trainer step is one engine step.
``evaluate()`` shards the evaluation prompts over the processes, samples them deterministically (ODE,
``eval_num_inference_steps``, a fixed seed per prompt) with the EMA weights and gathers the scores.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch
from transformers import Trainer

from r1vision.diffusion.advantages import group_advantages
from r1vision.diffusion.config import DiffusionGRPOConfig
from r1vision.diffusion.ema import EMA
from r1vision.diffusion.families import Conditioning, load_family, to_pil
from r1vision.diffusion.hooks import RunState, check_prompt_count, fill_deepspeed_autos
from r1vision.diffusion.outputs import EvaluateAndSaveMixin
from r1vision.diffusion.resume import ResumeMixin
from r1vision.diffusion.rollout import Generation, Rollout, encode_rows, replay, rollout, sde_window
from r1vision.diffusion.sampler import GroupRepeatSampler, seeded
from r1vision.diffusion.sde import latent_kl
from r1vision.trainer.checkpoint import CheckpointRenameMixin
from r1vision.trainer.preemption import PreemptionCallback

logger = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PARTS = {"rollout": 1, "shuffle": 2}  # independent random streams of one generation


def _name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _prompt_key(prompt: str) -> int:
    """A stable 64-bit key of a prompt (Python's ``hash`` differs between processes)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "little")


class DiffusionGRPOTrainer(CheckpointRenameMixin, ResumeMixin, EvaluateAndSaveMixin, Trainer):
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
        self.family = load_family(
            str(model),
            dtype=_DTYPES[args.denoiser_dtype],
            frozen_dtype=frozen,
            max_sequence_length=args.max_sequence_length,
        )
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
            lora = LoraConfig(
                r=args.lora_r,
                lora_alpha=args.lora_alpha,
                init_lora_weights="gaussian",
                target_modules=list(args.lora_target_modules),
            )
            denoiser = get_peft_model(denoiser, lora)
        self.model_path = str(model)
        callbacks = list(callbacks or [])
        if getattr(args, "metrics_csv", True):
            from r1vision.trainer.metrics_csv import MetricsCSVCallback

            callbacks.append(MetricsCSVCallback(os.path.join(args.output_dir, "metrics.csv")))
        callbacks.append(PreemptionCallback())  # a signal stops the run at a step boundary with a checkpoint
        super().__init__(
            model=denoiser,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            data_collator=_rows,
            callbacks=callbacks,
            **kwargs,
        )
        fill_deepspeed_autos(self, self.family.transformer)  # Trainer has built the DeepSpeed config
        self.steps_per_generation = args.steps_per_generation or args.gradient_accumulation_steps
        self.generation_images = (
            args.per_device_train_batch_size * self.accelerator.num_processes * self.steps_per_generation
        )
        args.check_generation_layout(self.accelerator.num_processes)
        check_prompt_count(args, self.accelerator.num_processes, train_dataset)
        self.ema = (
            EMA(self.model.parameters(), args.ema_decay, args.ema_update_interval) if args.ema else None
        )
        self.add_callback(RunState(self))
        self._metrics: dict[str, list[float]] = defaultdict(list)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self.reward_funcs)), thread_name_prefix="reward"
        )
        self._generation: Generation | None = None
        self._micro = 0  # micro-steps trained so far (a resumed run starts at global_step x accumulation)
        self._best_eval: float | None = None
        self.evaluated_steps: set[int] = set()
        from r1vision.trainer.logline import use_compact_log

        use_compact_log(self)

    # -------------------------------------------------------------------------------------------- data
    def get_train_dataloader(self) -> Any:
        """TRL's generation batch: each micro-step receives this process's whole share of the generation
        batch (``per_device_train_batch_size x steps_per_generation`` rows); a new one every
        ``steps_per_generation`` micro-steps (see :mod:`r1vision.diffusion.sampler`)."""
        return self._get_dataloader(
            dataset=self.train_dataset,
            description="Training",
            batch_size=self._train_batch_size * self.steps_per_generation,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _get_train_sampler(self, dataset: Any = None) -> GroupRepeatSampler:
        dataset = dataset if dataset is not None else self.train_dataset
        return GroupRepeatSampler(
            len(dataset),
            self.args.num_generations,
            self.generation_images,
            self.steps_per_generation,
            self.args.seed,
            self.args.spread_groups,
        )

    # ------------------------------------------------------------------------------------------- rollout
    def _generator(self, generation: int, part: str) -> torch.Generator:
        """Noise of one generation for this process: from the seed, the generation and the rank, distinct
        for any number of ranks (a resumed run samples the same)."""
        return seeded(self.args.seed, generation, self.accelerator.process_index, _PARTS[part])

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

    def _initial_noise(self, prompts: list[str], generation: int) -> torch.Tensor | None:
        """Flow-GRPO's ``same_latent``: one initial noise per prompt of a generation, the same on every
        process (a group may span processes), else ``None`` (drawn by the rollout)."""
        if not self.args.same_latent:
            return None
        side = self.family.latent_size(self.args.resolution)
        shape = (self.family.channels, side, side)
        draws = {
            p: torch.randn(shape, generator=seeded(self.args.seed, generation, _prompt_key(p)))
            for p in dict.fromkeys(prompts)
        }
        return torch.stack([draws[p] for p in prompts])

    def _generate(self, model: Any, rows: list[dict[str, Any]], index: int) -> Generation:
        """Sample, score and compute the advantages of one generation batch (this process's rows)."""
        args, family, acc = self.args, self.family, self.accelerator
        prompts = [str(r["prompt"]) for r in rows]
        unwrapped = acc.unwrap_model(model)
        generator = self._generator(index, "rollout")
        start = time.perf_counter()
        cond = encode_rows(family, prompts, args.guidance_scale > 1.0)
        noise = self._initial_noise(prompts, index)
        window = sde_window(
            args.num_inference_steps,
            args.sde_window_size,
            tuple(args.sde_window_range) if args.sde_window_range else None,
            generator,
        )
        was_training = unwrapped.training
        unwrapped.eval()
        # Sample in batches of rollout_batch_size images; each batch's rewards run in the pool while the next
        # batch is sampled (Flow-GRPO's executor), so only the last batch's rewards are waited for.
        size = args.rollout_batch_size or args.per_device_train_batch_size
        parts, pending = [], []
        rollout_s = time.perf_counter() - start  # prompt encoding counts as sampling
        for low in range(0, len(prompts), size):
            span = torch.arange(low, min(low + size, len(prompts)))
            tick = time.perf_counter()
            part = rollout(
                family,
                unwrapped,
                cond.select(span),
                steps=args.num_inference_steps,
                resolution=args.resolution,
                guidance_scale=args.guidance_scale,
                noise_level=args.noise_level,
                kind=args.sde_kind,
                window=window,
                generator=generator,
                noise=None if noise is None else noise[span],
            )
            rollout_s += time.perf_counter() - tick
            images, part.images = to_pil(part.images), torch.empty(0)  # scored as PIL; not kept
            pending.append(
                (
                    self._submit_rewards(prompts[low : low + len(span)], images, rows[low : low + len(span)]),
                    len(span),
                )
            )
            parts.append(part)
        unwrapped.train(was_training)
        roll = Rollout.cat(parts)
        tick = time.perf_counter()
        collected = [self._collect_rewards(futures, n) for futures, n in pending]
        values = torch.cat([v for v, _ in collected])
        reward_s = time.perf_counter() - tick  # the reward time not hidden behind sampling
        weighted = (values * self.reward_weights).nansum(dim=1)
        weighted[torch.isnan(values).all(dim=1)] = math.nan
        # Flow-GRPO's statistics are over the whole step: gather every process's rewards and prompts
        all_weighted, all_values, all_prompts = self._gather(weighted, values, prompts)
        advantages_all, stats = group_advantages(
            all_prompts, all_weighted, args.scale_rewards, args.adv_clip_max
        )
        mine = slice(acc.process_index * len(prompts), (acc.process_index + 1) * len(prompts))
        advantages = advantages_all[mine]
        keep = (
            torch.nonzero(advantages != 0).flatten()
            if args.drop_zero_advantage
            else torch.arange(len(prompts))
        )
        # shuffled, then dealt to the micro-steps (Flow-GRPO permutes its samples before re-batching)
        keep = keep[torch.randperm(len(keep), generator=self._generator(index, "shuffle"))]
        chunks = list(torch.tensor_split(keep, self.steps_per_generation))
        trained = roll.sde_steps[: max(1, int(len(roll.sde_steps) * args.timestep_fraction))]
        kept_all = self._sum(float(len(keep)))
        self._record_generation(
            all_weighted,
            all_values,
            stats,
            rollout_s=rollout_s,
            reward_s=reward_s,
            reward_busy_s=sum(b for _, b in collected),
            trained_samples=kept_all,
            images_per_s=len(prompts) / max(rollout_s, 1e-9),
        )
        return Generation(index, prompts, cond, roll, weighted, advantages, trained, chunks)

    def _gather(
        self, weighted: torch.Tensor, values: torch.Tensor, prompts: list[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        acc = self.accelerator
        if acc.num_processes == 1:
            return weighted, values, prompts
        from accelerate.utils import gather_object

        device = acc.device
        return (
            acc.gather(weighted.to(device)).cpu(),
            acc.gather(values.to(device)).cpu(),
            list(gather_object(prompts)),
        )

    def _sum(self, value: float) -> float:
        if self.accelerator.num_processes == 1:
            return value
        return float(self.accelerator.reduce(torch.tensor([value], device=self.accelerator.device), "sum"))

    # ----------------------------------------------------------------------------------------- training
    def training_step(
        self, model: Any, inputs: list[dict[str, Any]], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        spg = self.steps_per_generation
        index, slot = divmod(self._micro, spg)
        if self._generation is None or self._generation.index != index:
            if slot:  # resumed between the updates of a generation whose samples were not saved
                logger.warning(
                    "regenerating generation %d at micro-step %d of %d (no saved buffer)", index, slot, spg
                )
            self._generation = self._generate(model, inputs, index)
        # the weights equal those that sampled until this generation's first optimizer step
        on_policy = slot < self.args.gradient_accumulation_steps
        start = time.perf_counter()
        loss = self._train_rows(model, self._generation, self._generation.chunks[slot], on_policy)
        self._metrics["train_s"].append(time.perf_counter() - start)
        self._micro += 1
        return loss

    def _train_rows(self, model: Any, gen: Generation, rows: torch.Tensor, on_policy: bool) -> torch.Tensor:
        """Replay ``rows``' trained transitions under the current weights and back-propagate Flow-GRPO's loss.
        Every process runs the same forwards and backwards: without rows, one row with weight 0."""
        args, family = self.args, self.family
        weight = 1.0
        if len(rows) == 0:
            rows, weight = torch.zeros(1, dtype=torch.long), 0.0
        unwrapped = self.accelerator.unwrap_model(model)
        sub = gen.cond.select(rows)
        adv = gen.advantages[rows].to(family.device)
        old = gen.roll.log_probs[rows].to(family.device)
        scale = len(gen.trained) * self.args.gradient_accumulation_steps
        sums: dict[str, float] = defaultdict(float)
        for n, j in enumerate(gen.trained):
            with self._accumulate_locally(model, last=n == len(gen.trained) - 1):
                step = replay(
                    family,
                    model,
                    sub,
                    gen.roll,
                    j,
                    guidance_scale=args.guidance_scale,
                    noise_level=args.noise_level,
                    kind=args.sde_kind,
                    rows=rows,
                )
                ratio = torch.exp(step.log_prob - old[:, j])
                clipped = torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon)
                loss = torch.maximum(-adv * ratio, -adv * clipped).mean()
                sums["policy_loss"] += float(loss.detach())
                if args.beta > 0:
                    kl = self._kl(unwrapped, sub, gen.roll, j, rows, step).mean()
                    loss = loss + args.beta * kl
                    sums["kl"] += float(kl.detach())
                self._backward(loss * (weight / scale))
            delta = (step.log_prob - old[:, j]).detach()
            sums["approx_kl"] += float(0.5 * (delta**2).mean())
            sums["clipfrac"] += float(((ratio - 1).abs() > args.epsilon).float().mean())
            sums["clipfrac_gt_one"] += float((ratio - 1 > args.epsilon).float().mean())
            sums["clipfrac_lt_one"] += float((1 - ratio > args.epsilon).float().mean())
            if on_policy:  # the weights have not moved since this generation was sampled: replay is exact
                sums["logprob_parity_max"] = max(sums["logprob_parity_max"], float(delta.abs().max()))
        n = len(gen.trained)
        for key in ("policy_loss", "kl", "approx_kl", "clipfrac", "clipfrac_gt_one", "clipfrac_lt_one"):
            # a process without samples logs nothing (NaN is skipped when the processes' metrics are joined)
            self._metrics[key].append(sums[key] / n if weight else math.nan)
        self._metrics["logprob_parity_max"].append(
            sums["logprob_parity_max"] if weight and on_policy else math.nan
        )
        self._metrics["off_policy"].append(0.0 if on_policy else 1.0)
        loss_value = (sums["policy_loss"] + args.beta * sums["kl"]) / n * weight
        return torch.tensor(loss_value / self.args.gradient_accumulation_steps, device=self.args.device)

    @contextmanager
    def _accumulate_locally(self, model: Any, last: bool) -> Iterator[None]:
        """The transitions of one micro-step accumulate on each process and are reduced once, with the last:
        DDP's ``no_sync`` before it; under DeepSpeed the engine must not count them as accumulation
        boundaries either (accelerate's wrapper steps the engine at every boundary: one trainer step was one
        engine step per trained transition)."""
        from accelerate.utils import DistributedType

        acc = self.accelerator
        if last:
            yield
        elif acc.distributed_type == DistributedType.DEEPSPEED:
            state = acc.gradient_state
            was = state.sync_gradients
            state._set_sync_gradients(False)
            try:
                yield
            finally:
                state._set_sync_gradients(was)
        else:
            with acc.no_sync(model):
                yield

    def _backward(self, loss: torch.Tensor) -> None:
        """The loss is already divided by the accumulated transitions and micro-steps (DeepSpeed must not
        divide again, as transformers' own training step tells it)."""
        from accelerate.utils import DistributedType

        if self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            self.accelerator.backward(loss, scale_wrt_gas=False)
        else:
            self.accelerator.backward(loss)

    def _kl(
        self, unwrapped: Any, cond: Conditioning, roll: Any, j: int, rows: torch.Tensor, step: Any
    ) -> torch.Tensor:
        """KL of transition ``j`` to the reference, the adapter switched off (LoRA), else zero: Flow-GRPO's
        ``mean((mu - mu_ref)^2) / (2 std_dev_t^2)``, or with ``kl_use_dt`` the Gaussian KL of the transition."""
        if not hasattr(unwrapped, "disable_adapter"):
            return torch.zeros(len(rows), device=self.family.device)
        with torch.no_grad(), unwrapped.disable_adapter():
            ref = replay(
                self.family,
                unwrapped,
                cond,
                roll,
                j,
                guidance_scale=self.args.guidance_scale,
                noise_level=self.args.noise_level,
                kind=self.args.sde_kind,
                rows=rows,
            )
        return latent_kl(step.mean, ref.mean, step.std if self.args.kl_use_dt else step.std_dev_t)

    # ------------------------------------------------------------------------------------------ metrics
    def _layout(self) -> dict[str, Any]:
        """The VLM trainers' layout plus the generation batch, which decides the prompts each generation
        draws (:class:`~r1vision.diffusion.sampler.GroupRepeatSampler`)."""
        return {
            **super()._layout(),
            "steps_per_generation": self.steps_per_generation,
            "generation_images": self.generation_images,
        }


def _rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The collator: rows stay rows (prompts are text; the rollout makes the tensors)."""
    return batch
