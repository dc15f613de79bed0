"""The demo's stages: data, model, SFT, GRPO from the SFT checkpoint, and compute-matched SFT."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from r1vision.demo.config import DemoConfig
from r1vision.tasks.sgg.prompts import compact_prompt
from r1vision.tasks.sgg.task import SGGTask

FAMILY = "qwen2_vl"
SPLITS = ("train", "rl", "test", "test_ood")


class CompactSGGTask(SGGTask):
    """The SGG task with the one-line prompt as default, so ``run_inference`` asks what training taught."""

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        kwargs.setdefault("prompt", "compact")
        return super().load(source, split, **kwargs)


@dataclass
class StageResult:
    """A trained stage: where its model is, how long ``train()`` took and how many steps it made.

    ``seconds`` is wall time (what a user waits); ``cpu_seconds`` is this process's CPU time, which the
    compute-matched arm is matched on (fair on an idle machine; see :class:`CpuTimeBudget` for load).
    """

    name: str
    model_dir: str
    seconds: float
    steps: int
    cpu_seconds: float = 0.0

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(self.steps, 1)


def make_data(cfg: DemoConfig, root: Path, seed: int) -> Path:
    """Write the four splits: SFT ``train``, GRPO prompts ``rl``, i.i.d. ``test`` and ``test_ood``.

    ``train``/``test`` draw the ``cfg.held_out`` pairs at ``cfg.held_out_sft_rate`` x their natural rate
    (0: never), ``rl`` draws every pair, and each ``test_ood`` scene has at least one held-out pair.
    """
    from r1vision.tasks.sgg.synth import synth_sgg

    sft_range = (1, cfg.sft_max_objects)
    held = {"exclude_names": cfg.held_out, "exclude_rate": 1.0 - cfg.held_out_sft_rate}
    for split, n, (lo, hi), names in (
        ("train", cfg.n_sft, sft_range, held),
        ("rl", cfg.n_rl, cfg.rl_objects, {}),
        ("test", cfg.n_test, sft_range, held),
        ("test_ood", cfg.n_test, cfg.ood_objects, {"require_names": cfg.held_out}),
    ):
        synth_sgg(root, n, seed=seed, split=split, preset="demo", min_objects=lo, max_objects=hi, **names)
    return root


def load_rows(data: Path, split: str, cfg: DemoConfig, with_completion: bool = True):
    """Trainer rows of ``split`` with the compact prompt and the demo's pixel budget."""
    return CompactSGGTask().load(
        str(data),
        split=split,
        model_family=FAMILY,
        max_pixels=cfg.max_pixels,
        with_completion=with_completion,
    )


def build_model(cfg: DemoConfig, data: Path, seed: int) -> Path:
    """The demo model (cached on disk): random weights for ``seed``, a BPE trained on the SFT targets."""
    from r1vision.testing.tiny import tiny_model_path

    rows = load_rows(data, "train", cfg)
    # The fixed prompt and chat scaffolding repeated, so they merge into a few tokens too.
    scaffold = [compact_prompt(FAMILY), "user\n", "assistant\n"] * 16
    corpus = [r["completion"][0]["content"][0]["text"] for r in rows] + scaffold
    return tiny_model_path(
        FAMILY,
        seed=seed,
        hidden=cfg.hidden,
        layers=cfg.layers,
        heads=cfg.heads,
        vision_width=cfg.vision_width,
        vision_depth=cfg.vision_depth,
        corpus=corpus,
        rope_theta=cfg.rope_theta,
        mrope_section=list(cfg.mrope_section),
        max_pixels=cfg.max_pixels,
        vocab_size=cfg.vocab_size,
        compact_tokenizer=True,
    )


def _common(cfg: DemoConfig, seed: int, quiet: bool) -> dict[str, Any]:
    return dict(
        report_to=[],
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        save_strategy="no",
        max_pixels=cfg.max_pixels,
        disable_tqdm=quiet,
        dataloader_num_workers=0,
        # TRL defaults to bf16 autocast, which CPUs without bf16 units run ~10x slower than fp32.
        bf16=False,
        gradient_checkpointing=False,  # nothing to save at this size; recomputation only costs time
    )


def train_sft(
    name: str,
    model: str | Path,
    data: Path,
    out_dir: Path,
    cfg: DemoConfig,
    seed: int,
    steps: int,
    lr: float,
    scheduler: str = "cosine",
    warmup_ratio: float = 0.05,
    quiet: bool = False,
    cpu_seconds: float | None = None,
) -> StageResult:
    """Supervised fine-tuning on the ``train`` split; returns the saved model and the time of training.

    ``cpu_seconds``: stop after this much process CPU time (``steps`` is then only an upper bound), with
    the learning rate decaying linearly in CPU time (:class:`CpuTimeBudget`).
    """
    from r1vision.trainer.config import VisionSFTConfig
    from r1vision.trainer.sft import VisionSFTTrainer

    rows = load_rows(data, "train", cfg)
    rows = rows.remove_columns([c for c in rows.column_names if c not in ("prompt", "completion", "images")])
    args = VisionSFTConfig(
        overwrite_output_dir=True,  # the demo rebuilds its folders on every run
        output_dir=str(out_dir),
        max_steps=steps,
        per_device_train_batch_size=cfg.sft_batch,
        learning_rate=lr,
        lr_scheduler_type=scheduler,
        warmup_steps=int(warmup_ratio * steps),
        logging_steps=max(1, steps // 30),
        **_common(cfg, seed, quiet),
    )
    budget = [CpuTimeBudget(cpu_seconds, lr)] if cpu_seconds is not None else None
    trainer = VisionSFTTrainer(str(model), args=args, train_dataset=rows, callbacks=budget)
    seconds, cpu = _timed(trainer.train)
    trainer.save_model(str(out_dir))
    return StageResult(name, str(out_dir), seconds, int(trainer.state.global_step), cpu)


def _vision_token_ids(model: str | Path) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    names = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
    return [int(tok.convert_tokens_to_ids(t)) for t in names]


def train_grpo(
    model: str | Path, data: Path, out_dir: Path, cfg: DemoConfig, seed: int, quiet: bool = False
) -> StageResult:
    """GRPO from ``model`` on the ``rl`` prompts: format (``cfg.strict_format``) + object + relation F1."""
    from r1vision.tasks.sgg.f1 import f1_rewards
    from r1vision.trainer.config import VisionGRPOConfig
    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = load_rows(data, "rl", cfg, with_completion=False)
    specs = f1_rewards(
        FAMILY, weights=cfg.reward_weights, strict_format=cfg.strict_format, max_pixels=cfg.max_pixels
    )
    args = VisionGRPOConfig(
        overwrite_output_dir=True,  # the demo rebuilds its folders on every run
        output_dir=str(out_dir),
        max_steps=cfg.grpo_steps,
        per_device_train_batch_size=cfg.grpo_prompts * cfg.num_generations,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        learning_rate=cfg.grpo_lr,
        lr_scheduler_type="constant",
        beta=cfg.beta,
        temperature=cfg.temperature,
        reward_weights=[s.weight for s in specs],
        # A sampled vision token would add a placeholder without image features to the training forward.
        generation_kwargs={"suppress_tokens": _vision_token_ids(model)},
        logging_steps=1,
        **_common(cfg, seed, quiet),
    )
    trainer = VisionGRPOTrainer(str(model), [s.func for s in specs], args=args, train_dataset=rows)
    seconds, cpu = _timed(trainer.train)
    trainer.save_model(str(out_dir))
    trainer.processing_class.save_pretrained(str(out_dir))
    return StageResult("sft+grpo", str(out_dir), seconds, int(trainer.state.global_step), cpu)


def _timed(fn) -> tuple[float, float]:
    """Run ``fn()``; return (wall seconds, process CPU seconds) it took."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def matched_steps(target_cpu_seconds: float, sft: StageResult) -> int:
    """SFT steps that take ``target_cpu_seconds`` of CPU time at the SFT stage's measured pace."""
    per_step = sft.cpu_seconds / max(sft.steps, 1)
    return max(1, math.ceil(target_cpu_seconds / max(per_step, 1e-6)))


class CpuTimeBudget(TrainerCallback):
    """Train for ``seconds`` of process CPU time, the learning rate decaying linearly to 0 over it.

    Wall time is not a fair budget on a shared machine: measured on this 2-core box, compute-matched SFT
    got 61 steps against GRPO's 150 in the same 386 s of wall time because the load changed between the
    arms. Process CPU time (all of this process's threads) counts only the work this run did, which is
    fair on an idle machine; under contention it is not load-independent either: with two torch threads
    the same GRPO work cost 2.8-3.6x more CPU seconds (benchmarks/RESULTS.md, demo 2026-11-24), so run
    the demo alone (a token x FLOP budget is the open fix). The rate is set before each optimiser step,
    after the (constant) scheduler's update; the logged ``learning_rate`` is the scheduler's base rate.
    """

    def __init__(self, seconds: float, base_lr: float, clock=time.process_time) -> None:
        self.seconds, self.base_lr, self.clock = float(seconds), float(base_lr), clock
        self.start: float | None = None

    def _elapsed(self) -> float:
        return 0.0 if self.start is None else self.clock() - self.start

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        lr = self.base_lr * max(0.0, 1.0 - self._elapsed() / self.seconds)
        for group in getattr(optimizer, "param_groups", []):
            group["lr"] = lr

    def on_step_end(self, args, state, control, **kwargs):
        if self._elapsed() >= self.seconds:
            control.should_training_stop = True
        return control
