"""The demo's stages: data, model, SFT, GRPO from the SFT checkpoint, and compute-matched SFT."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from r1vision.demo.config import DemoConfig
from r1vision.tasks.base import RunContext, guarded_rewards
from r1vision.tasks.sgg.prompts import compact_prompt
from r1vision.tasks.sgg.synth import synth_sgg
from r1vision.tasks.sgg.task import SGGOptions, SGGTask
from r1vision.testing.tiny import tiny_model_path
from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig
from r1vision.trainer.flops import FlopCounter, FlopCounterCallback
from r1vision.trainer.grpo import VisionGRPOTrainer
from r1vision.trainer.sft import VisionSFTTrainer
from r1vision.vision.budget import PixelBudget

FAMILY = "qwen2_vl"
SPLITS = ("train", "rl", "test", "test_ood")


def task_options(cfg: DemoConfig, with_completion: bool | None = None) -> SGGOptions:
    """The demo's SGG options: the one-line prompt, the F1 reward set with the demo's weights."""
    return SGGOptions(
        prompt="compact",
        reward_set="f1",
        weights=dict(cfg.reward_weights),
        strict_format=cfg.strict_format,
        with_completion=with_completion,
    )


def run_context(cfg: DemoConfig) -> RunContext:
    """The demo model's family and pixel budget (84x84 images: 9 image tokens)."""
    return RunContext(FAMILY, PixelBudget.for_family(FAMILY, max_pixels=cfg.max_pixels))


@dataclass
class StageResult:
    """A trained stage: where its model is, how long ``train()`` took, its steps and its counted FLOPs.

    ``flops`` is the model compute counted by :mod:`r1vision.trainer.flops` (what the compute-matched arm
    is matched on: it does not depend on machine load); ``seconds`` is wall time (what a user waits) and
    ``cpu_seconds`` this process's CPU time, both informational.
    """

    name: str
    model_dir: str
    seconds: float
    steps: int
    cpu_seconds: float = 0.0
    flops: float = 0.0

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(self.steps, 1)

    @property
    def flops_per_step(self) -> float:
        return self.flops / max(self.steps, 1)


def make_data(cfg: DemoConfig, root: Path, seed: int) -> Path:
    """Write the four splits: SFT ``train``, GRPO prompts ``rl``, i.i.d. ``test`` and ``test_ood``.

    ``train``/``test`` draw the ``cfg.held_out`` pairs at ``cfg.held_out_sft_rate`` x their natural rate
    (0: never), ``rl`` draws every pair, and each ``test_ood`` scene has at least one held-out pair.
    """

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
    return SGGTask().load(str(data), split, task_options(cfg, with_completion), run_context(cfg))


def build_model(cfg: DemoConfig, data: Path, seed: int, rows: Any = None) -> Path:
    """The demo model (cached on disk): random weights for ``seed``, a BPE trained on the SFT targets and
    prompts of ``rows`` (default: the scene-graph demo's SFT split)."""

    prompts = [compact_prompt(FAMILY)]  # the scene-graph demo's one prompt
    if rows is None:
        rows = load_rows(data, "train", cfg)
    else:
        prompts = sorted(
            {c["text"] for r in rows for m in r["prompt"] for c in m["content"] if c.get("text")}
        )
    # The prompts and chat scaffolding repeated, so they merge into a few tokens too.
    scaffold = [*prompts, "user\n", "assistant\n"] * 16
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
        **cfg.video_options,
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
    flops: float | None = None,
    rows: Any = None,
) -> StageResult:
    """Supervised fine-tuning on the ``train`` split; returns the saved model, its time and FLOPs.

    ``flops``: stop once this many FLOPs are counted (``steps`` is then only an upper bound), with the
    learning rate decaying linearly in counted FLOPs (:class:`FlopBudget`).
    """

    if rows is None:
        rows = load_rows(data, "train", cfg)
    keep = ("prompt", "completion", "images", "video", "videos")
    rows = rows.remove_columns([c for c in rows.column_names if c not in keep])
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
    counter = FlopCounter()
    callbacks = [FlopCounterCallback(counter)]
    if flops is not None:
        callbacks.append(FlopBudget(flops, lr, counter))
    trainer = VisionSFTTrainer(str(model), args=args, train_dataset=rows, callbacks=callbacks)
    seconds, cpu = _timed(trainer.train)
    trainer.save_model(str(out_dir))
    return StageResult(name, str(out_dir), seconds, int(trainer.state.global_step), cpu, counter.total)


def _vision_token_ids(model: str | Path) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    names = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
    return [int(tok.convert_tokens_to_ids(t)) for t in names]


def train_grpo(
    model: str | Path,
    data: Path,
    out_dir: Path,
    cfg: DemoConfig,
    seed: int,
    quiet: bool = False,
    rows: Any = None,
    specs: Any = None,
    overrides: dict[str, Any] | None = None,
    callbacks: list[Any] | None = None,
) -> StageResult:
    """GRPO from ``model`` on ``rows`` (default: the scene-graph ``rl`` prompts) with the reward ``specs``
    (default: format (``cfg.strict_format``) + object + relation F1); ``overrides``: config fields the
    benchmarks vary (e.g. ``dynamic_sampling``)."""

    if rows is None:
        rows = load_rows(data, "rl", cfg, with_completion=False)
    if specs is None:
        specs = SGGTask().rewards(task_options(cfg), run_context(cfg))
    specs = guarded_rewards(specs)
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
        **{**_common(cfg, seed, quiet), **(overrides or {})},
    )
    trainer = VisionGRPOTrainer(
        str(model), [s.func for s in specs], args=args, train_dataset=rows, callbacks=callbacks
    )
    # Generation, log-prob and (beta > 0) reference forwards all count, like the training forwards.
    counter = FlopCounter()
    trainer.add_callback(FlopCounterCallback(counter, extra_models=[trainer.ref_model]))
    seconds, cpu = _timed(trainer.train)
    trainer.save_model(str(out_dir))
    trainer.processing_class.save_pretrained(str(out_dir))
    steps = int(trainer.state.global_step)
    return StageResult("sft+grpo", str(out_dir), seconds, steps, cpu, counter.total)


def _timed(fn) -> tuple[float, float]:
    """Run ``fn()``; return (wall seconds, process CPU seconds) it took."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def matched_steps(target_flops: float, sft: StageResult) -> int:
    """SFT steps that count ``target_flops`` at the SFT stage's FLOPs per step (padding varies a little)."""
    return max(1, math.ceil(target_flops / max(sft.flops_per_step, 1.0)))


class FlopBudget(TrainerCallback):
    """Train until ``counter`` has counted ``flops`` model FLOPs, the learning rate decaying linearly to 0.

    The compute-matched arm's budget. Wall time failed on a shared machine (61 matched SFT steps against
    GRPO's 150 in the same 386 s), and so did process CPU time: under contention the same GRPO work cost
    2.8-3.6x more CPU seconds, so the matched arm got 241, 942 and 262 steps on three seeds. Counted
    FLOPs (:mod:`r1vision.trainer.flops`) depend only on the work done. Training stops at the step end
    nearest the target (within half a step of it). The rate is set before each optimiser step, after
    the (constant) scheduler's update; the logged ``learning_rate`` is the scheduler's base rate.
    """

    def __init__(self, flops: float, base_lr: float, counter: FlopCounter) -> None:
        if flops <= 0:
            raise ValueError(f"FLOP budget must be positive, got {flops}")
        self.flops, self.base_lr, self.counter = float(flops), float(base_lr), counter
        self._step_start = 0.0

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        self._step_start = self.counter.total
        lr = self.base_lr * max(0.0, 1.0 - self._step_start / self.flops)
        for group in getattr(optimizer, "param_groups", []):
            group["lr"] = lr

    def on_step_end(self, args, state, control, **kwargs):
        done = self.counter.total
        # Stop where one more step would land farther from the target than stopping now.
        if done + (done - self._step_start) / 2 >= self.flops:
            control.should_training_stop = True
        return control
