"""The demo's three arms for any task: SFT, GRPO from the SFT checkpoint, SFT continued for GRPO's FLOPs.

A :class:`DemoTask` says what differs per task (its data, rows, rewards, evaluation, table and pictures);
:func:`run_seed` runs the arms and :func:`run_task_demo` the seeds, writing ``eval_table.md``, ``eval.json``,
``metrics.csv``, ``reward_curve.png`` and the task's pictures.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from r1vision.demo import arms, report
from r1vision.demo.config import DemoConfig
from r1vision.tasks.base import RunContext
from r1vision.vision.budget import PixelBudget


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


class DemoTask:
    """What one task's demo defines; the arms and the report are shared (:func:`run_seed`)."""

    name = ""
    title = ""  # "SFT -> GRPO on ..." in the table's heading
    headline = ""  # the metric the verdicts compare (a fraction)
    headline_label = ""
    reward_label = "mean reward"
    columns: tuple[tuple[str, str, bool], ...] = ()

    config_class: type[DemoConfig] = DemoConfig

    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg

    @classmethod
    def make(cls, quick: bool) -> DemoTask:
        """The task with its default (or ``quick``) configuration."""
        return cls(cls.config_class.quick() if quick else cls.config_class())

    def make_data(self, root: Path, seed: int) -> Path:
        """Write the splits ``train`` (SFT), ``rl`` (GRPO prompts), ``test`` and ``test_ood``: the held-out
        pairs rare in SFT and the i.i.d. test, at their natural rate in ``rl``, in every OOD row."""
        cfg = self.cfg
        held = {"exclude": cfg.held_out, "exclude_rate": 1.0 - cfg.held_out_sft_rate}
        for split, n, kw in (
            ("train", cfg.n_sft, held),
            ("rl", cfg.n_rl, {}),
            ("test", cfg.n_test, held),
            ("test_ood", cfg.n_test, {"require": cfg.held_out}),
        ):
            self.synth(root, split, n, seed, **kw)
        return root

    def synth(self, root: Path, split: str, n: int, seed: int, **pairs: Any) -> None:
        """Write ``n`` rows of ``split`` under ``root`` with the task's synthesiser (``pairs``: its
        ``exclude``/``exclude_rate``/``require``)."""
        raise NotImplementedError

    def run_context(self, eos: tuple[int, ...] = ()) -> Any:
        """The demo model's family and pixel budget, ``eos`` and the completion length."""
        from r1vision.demo.arms import FAMILY

        budget = PixelBudget.for_family(FAMILY, max_pixels=self.cfg.max_pixels)
        return RunContext(FAMILY, budget, eos, self.cfg.max_completion_length)

    def rows(self, data: Path, split: str, with_completion: bool = True) -> Any:
        """Trainer rows of ``split``."""
        raise NotImplementedError

    def reward_specs(self, model_dir: str | Path) -> list[Any]:
        """The task's shipped rewards (:class:`~r1vision.tasks.base.RewardSpec`) for GRPO."""
        raise NotImplementedError

    def evaluate(self, model_dir: str, data: Path, split: str, pred_dir: Path) -> dict[str, float]:
        """Metrics of ``model_dir`` on ``split`` (predictions written under ``pred_dir``)."""
        raise NotImplementedError

    def describe(self, iid: dict[str, float], ood: dict[str, float]) -> str:
        """One progress line about an arm's i.i.d. and OOD metrics."""
        return f"i.i.d. {self.headline_label} {iid[self.headline]:.3f}, OOD {ood[self.headline]:.3f}"

    def intro(self, results: list[dict[str, Any]]) -> list[str]:
        """The table's explanation lines."""
        return []

    def design(self, data: str, pairs: str, rewards: str) -> str:
        """The sentence that says how the arms were trained (the start of :meth:`intro`)."""
        held = ", ".join(f"'{n}'" for n in self.cfg.held_out)
        return (
            f"SFT on {data} in which the {pairs} pairs {held} are rare ({self.cfg.held_out_sft_rate:g} x their "
            f"natural rate); GRPO prompts show every pair, rewarded by {rewards}; the compute-matched arm "
            "continues SFT (same data, linear decay) for GRPO's counted model FLOPs."
        )

    def split_titles(self) -> dict[str, str]:
        return {"test": "i.i.d. test", "test_ood": "OOD test"}

    def draw(self, out: Path, results: list[dict[str, Any]]) -> None:
        """Pictures of predictions (optional)."""

    def write_tables(self, out: Path, results: list[dict[str, Any]]) -> str:

        return report.write_report(
            out,
            results,
            self.title,
            self.intro(results),
            self.split_titles(),
            self.cfg.to_dict(),
            self.columns,
            self.headline,
            self.headline_label,
        )


def run_seed(task: DemoTask, seed: int, out: Path, quiet: bool = False) -> tuple[dict[str, Any], list[dict]]:
    """One full demo run of ``task`` for ``seed`` under ``out``; returns its result record and metrics rows."""
    from r1vision.trainer.flops import format_flops

    cfg = task.cfg
    t0 = time.perf_counter()
    secs: dict[str, float] = {}
    out.mkdir(parents=True, exist_ok=True)
    data = task.make_data(out / "data", seed)
    sft_rows = task.rows(data, "train")
    base = arms.build_model(cfg, data, seed, rows=sft_rows)
    secs["setup"] = time.perf_counter() - t0
    say(
        f"[1/6] seed {seed}: data {cfg.n_sft} SFT / {cfg.n_rl} RL / {cfg.n_test}+{cfg.n_test} test rows, "
        f"model {base} ({secs['setup']:.0f}s)"
    )

    say(f"[2/6] SFT: {cfg.sft_steps} steps, batch {cfg.sft_batch}, lr {cfg.sft_lr:g}")
    sft = arms.train_sft(
        "sft", base, data, out / "sft", cfg, seed, cfg.sft_steps, cfg.sft_lr, quiet=quiet, rows=sft_rows
    )
    secs["sft"] = sft.seconds
    preds: dict[str, dict[str, Path]] = {"test": {}, "test_ood": {}}
    evals: dict[str, dict[str, dict[str, float]]] = {"test": {}, "test_ood": {}}

    def evaluate(stage: arms.StageResult) -> None:
        for split in ("test", "test_ood"):
            pred_dir = out / "predictions" / f"{stage.name.replace('+', '_')}_{split}"
            evals[split][stage.name] = task.evaluate(stage.model_dir, data, split, pred_dir)
            preds[split][stage.name] = pred_dir
        say(
            f"      {stage.name}: {stage.steps} steps, {format_flops(stage.flops)} in {stage.seconds:.0f}s "
            f"({stage.cpu_seconds:.0f} CPU-s); "
            + task.describe(evals["test"][stage.name], evals["test_ood"][stage.name])
        )

    evaluate(sft)
    say(
        f"[3/6] GRPO from the SFT checkpoint: {cfg.grpo_steps} steps x {cfg.grpo_prompts} prompts x "
        f"{cfg.num_generations} samples, lr {cfg.grpo_lr:g}, temperature {cfg.temperature:g}"
    )
    rl_rows = task.rows(data, "rl", with_completion=False)
    grpo = arms.train_grpo(
        sft.model_dir,
        data,
        out / "grpo",
        cfg,
        seed,
        quiet=quiet,
        rows=rl_rows,
        specs=task.reward_specs(sft.model_dir),
    )
    secs["grpo"] = grpo.seconds
    evaluate(grpo)

    # Upper bound only: the FLOP budget stops it (x3: batches differ in padding).
    steps = 3 * arms.matched_steps(grpo.flops, sft)
    say(
        f"[4/6] compute-matched SFT: {format_flops(grpo.flops)} counted (GRPO's; ~"
        f"{arms.matched_steps(grpo.flops, sft)} SFT steps), lr {cfg.baseline_lr:g} decaying linearly to 0 "
        f"over them"
    )
    matched = arms.train_sft(
        "sft_matched",
        sft.model_dir,
        data,
        out / "sft_matched",
        cfg,
        seed,
        steps,
        cfg.baseline_lr,
        scheduler="constant",
        warmup_ratio=0.0,
        quiet=quiet,
        flops=grpo.flops,
        rows=sft_rows,
    )
    secs["sft_matched"] = matched.seconds
    evaluate(matched)

    rows = report.collect_metrics(
        out, {"sft": sft.model_dir, "sft+grpo": grpo.model_dir, "sft_matched": matched.model_dir}, seed
    )
    curve = report.reward_curve(rows).get(seed, ([], []))[1]
    secs["total"] = time.perf_counter() - t0
    result = {
        "seed": seed,
        "eval": evals,
        "seconds": secs,
        "cpu_seconds": {"sft": sft.cpu_seconds, "grpo": grpo.cpu_seconds, "sft_matched": matched.cpu_seconds},
        "steps": {"sft": sft.steps, "grpo": grpo.steps, "sft_matched": matched.steps},
        # What the matched arm is matched on; cpu_seconds and seconds are informational.
        "flops": {"sft": sft.flops, "grpo": grpo.flops, "sft_matched": matched.flops},
        "compute_match": "counted model FLOPs (r1vision.trainer.flops)",
        "reward_curve_flat": report.is_flat(curve),
        "load_average": list(os.getloadavg()),
        "predictions": {s: {a: str(p) for a, p in d.items()} for s, d in preds.items()},
        "data": str(data),
    }
    return result, rows


def run_task_demo(task: DemoTask, out: Path, seed: int, seeds: int, quiet: bool) -> int:
    """Run ``seeds`` seeds of ``task`` from ``seed``, then write the table, metrics and pictures."""

    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results, rows = [], []
    for s in range(seed, seed + max(1, seeds)):
        result, seed_rows = run_seed(task, s, out / f"seed{s}", quiet=quiet)
        # Kept as soon as a seed finishes, so a stopped multi-seed run still has its finished seeds.
        (out / f"seed{s}" / "result.json").write_text(json.dumps(result, indent=2, default=str))
        results.append(result)
        rows += seed_rows
    say("[5/6] writing metrics.csv, reward_curve.png and pictures")
    report.write_metrics_csv(out, rows)
    report.plot_reward_curve(out, rows, task.reward_label)
    task.draw(out, results)
    text = task.write_tables(out, results)
    say(f"[6/6] held-out evaluation ({task.name}):\n\n{text}")
    say(f"demo finished in {time.perf_counter() - start:.0f}s; outputs in {out}/")
    return 0
