"""Dynamic sampling on the scene-graph demo: GRPO steps and wall time to a fixed OOD relation recall, with and
without ``dynamic_sampling``, from the same SFT checkpoint, over several seeds.

The first seed builds the demo's data, model and SFT stage (``r1vision demo``'s defaults); every seed reuses
that data and SFT checkpoint (``--sft-from DIR``: an earlier run's seed folder), so only GRPO varies with the
seed. Per seed GRPO runs twice from the checkpoint (the two arms alternate which goes first from seed to
seed), each saving a snapshot every ``--every`` steps; afterwards every snapshot is scored on the OOD split
(greedy, as the demo scores). The targets are fixed before GRPO runs: the SFT checkpoint's OOD relation
recall + each of ``--gains`` points. For each arm and target: the first snapshot step at or above it, and
the GRPO training wall time up to that step (snapshot saving excluded); "not reached" when no snapshot gets
there. Also: generation rounds per step and prompts drawn, from the run's metrics.

    PYTHONPATH=src:benchmarks python benchmarks/bench_dynamic_sampling.py [--seeds 3] [--gains 5,15,25] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch
from machine_info import describe
from transformers import TrainerCallback

from r1vision.demo import arms
from r1vision.demo.config import DemoConfig
from r1vision.demo.report import HEADLINE
from r1vision.demo.sgg import SGGDemo

ARMS: dict[str, dict] = {"plain": {}, "dynamic": {"dynamic_sampling": True}}


class Snapshots(TrainerCallback):
    """Saves the policy every ``every`` steps and records the training wall time up to each, the time spent
    saving left out."""

    def __init__(self, out: Path, every: int) -> None:
        self.out, self.every = out, every
        self.start = 0.0
        self.paused = 0.0
        self.times: dict[int, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.every:
            return
        now = time.perf_counter()
        self.times[state.global_step] = now - self.start - self.paused
        folder = self.out / f"step-{state.global_step}"
        model.save_pretrained(folder)
        processing_class.save_pretrained(folder)
        self.paused += time.perf_counter() - now


def _metric_means(out: Path, key: str) -> float:
    with open(out / "metrics.csv") as f:
        values = [float(r[key]) for r in csv.DictReader(f) if r.get(key)]
    return float(np.mean(values)) if values else float("nan")


def run_seed(
    seed: int,
    root: Path,
    cfg: DemoConfig,
    every: int,
    gains: list[float],
    sft_from: Path | None = None,
    arm_overrides: dict[str, dict] = ARMS,
) -> dict:
    """One seed: data, SFT and both GRPO arms; with ``sft_from`` (an earlier seed's folder) its data and SFT
    checkpoint are reused and only GRPO runs with this seed."""
    task = SGGDemo(cfg)
    if sft_from is not None:
        data, sft_dir = sft_from / "data", str(sft_from / "sft")
    else:
        data = task.make_data(root / "data", seed)
        sft_rows = task.rows(data, "train")
        base = arms.build_model(cfg, data, seed, rows=sft_rows)
        sft_dir = arms.train_sft("sft", base, data, root / "sft", cfg, seed, cfg.sft_steps, cfg.sft_lr,
                                 quiet=True, rows=sft_rows).model_dir  # fmt: skip
    sft_ood = task.evaluate(sft_dir, data, "test_ood", root / "pred" / "sft")[HEADLINE]
    targets = {gain: sft_ood + gain / 100 for gain in gains}
    result: dict = {
        "seed": seed,
        "sft_ood": sft_ood,
        "targets": targets,
        "arms": {},
        "sft_from": str(sft_from or ""),
    }
    order = list(arm_overrides) if seed % 2 == 0 else list(reversed(arm_overrides))
    for name in order:
        snaps = Snapshots(root / f"{name}_snapshots", every)
        out = root / name
        fields = dict(arm_overrides[name])
        # the demo sets max_steps from its config: a longer arm changes the config, not the fields
        arm_cfg = dataclasses.replace(cfg, grpo_steps=fields.pop("max_steps", cfg.grpo_steps))
        stage = arms.train_grpo(sft_dir, data, out, arm_cfg, seed, quiet=True, overrides=fields,
                                callbacks=[snaps])  # fmt: skip
        curve = {}
        for step in sorted(snaps.times):
            folder = root / f"{name}_snapshots" / f"step-{step}"
            curve[step] = task.evaluate(str(folder), data, "test_ood", root / "pred" / f"{name}-{step}")[
                HEADLINE
            ]
        reached = {g: next((s for s in sorted(curve) if curve[s] >= t), None) for g, t in targets.items()}
        arm = {
            "order": order.index(name),
            "train_seconds": stage.seconds,
            "curve": curve,
            "snapshot_seconds": snaps.times,
            "steps_to_target": reached,
            "seconds_to_target": {g: snaps.times[s] if s else None for g, s in reached.items()},
            "final_ood": curve[max(curve)],
        }
        if name == "dynamic":
            arm["rounds_per_step"] = _metric_means(out, "dynamic_sampling/rounds")
            arm["prompts_drawn_per_step"] = _metric_means(out, "dynamic_sampling/prompts_drawn")
        arm["frac_reward_zero_std"] = _metric_means(out, "frac_reward_zero_std")
        result["arms"][name] = arm
        shown = {k: v for k, v in arm.items() if k not in ("curve", "snapshot_seconds")}
        print(json.dumps({"seed": seed, "arm": name, **shown}), flush=True)
    return result


def _cell(values: list) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return f"not reached (0 of {len(values)})"
    text = f"{np.mean(got):.1f}" if len(got) == 1 else f"{np.mean(got):.1f} ± {np.std(got, ddof=1):.1f}"
    return text + ("" if len(got) == len(values) else f" (reached in {len(got)} of {len(values)})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=25, help="steps between OOD snapshots")
    p.add_argument(
        "--gains", default="5,15,25", help="targets: SFT OOD relation recall + each of these (points)"
    )
    p.add_argument(
        "--long-plain",
        type=int,
        default=0,
        metavar="N",
        help="also a plain arm of N steps (e.g. the steps plain GRPO takes in dynamic's wall time)",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="the smoke-run demo (checks the benchmark only)")
    p.add_argument("--out", default="bench_dynamic_sampling_out")
    p.add_argument(
        "--sft-from",
        default=None,
        help="a seed folder of an earlier run: reuse its data and SFT (default: the first seed's)",
    )
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    cfg = DemoConfig.quick() if a.quick else DemoConfig()
    every = 1 if a.quick else a.every
    gains = [float(g) for g in a.gains.split(",")]
    arm_overrides = dict(ARMS)
    if a.long_plain:
        arm_overrides[f"plain-{a.long_plain}"] = {"max_steps": a.long_plain}
    before = describe()
    sft_from = Path(a.sft_from) if a.sft_from else None
    runs = []
    for s in range(a.seed, a.seed + a.seeds):
        runs.append(run_seed(s, Path(a.out) / f"seed{s}", cfg, every, gains, sft_from, arm_overrides))
        sft_from = sft_from or Path(a.out) / f"seed{s}"  # later seeds: the first seed's data and SFT
    lines = [f"machine: {before} (before) / {describe()} (after); torch threads {a.threads}", ""]
    head = " | ".join(f"steps to SFT+{g:g} | s to SFT+{g:g}" for g in gains)
    lines += [f"| arm | {head} | final OOD recall (%) | GRPO train s | flat groups generated "
              "(frac_reward_zero_std) | generation rounds per step |",
              "|---|" + "---|---|" * len(gains) + "---|---|---|---|"]  # fmt: skip
    for name in arm_overrides:
        arm = [r["arms"][name] for r in runs]
        rounds = f"{np.mean([x['rounds_per_step'] for x in arm]):.2f}" if name == "dynamic" else "1"
        cells = " | ".join(
            f"{_cell([x['steps_to_target'][g] for x in arm])} | {_cell([x['seconds_to_target'][g] for x in arm])}"
            for g in gains
        )
        lines.append(
            f"| {name} | {cells} | {_cell([100 * x['final_ood'] for x in arm])} "
            f"| {_cell([x['train_seconds'] for x in arm])} "
            f"| {np.mean([x['frac_reward_zero_std'] for x in arm]):.3f} | {rounds} |"
        )
    sft = ", ".join(f"seed {r['seed']}: {100 * r['sft_ood']:.1f}" for r in runs)
    lines += ["", f"SFT checkpoint's OOD relation recall (%): {sft}"]
    text = "\n".join(lines)
    print(text)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "bench_dynamic_sampling.json").write_text(
        json.dumps({"runs": runs, "markdown": text}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
