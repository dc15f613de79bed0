"""Held-out evaluation of the demo's arms and the files it writes: tables, metrics.csv, curves, drawings."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from r1vision.demo.arms import FAMILY, run_context, task_options
from r1vision.demo.config import DemoConfig
from r1vision.generation.sampling import SamplingOptions
from r1vision.runners.infer import run_inference
from r1vision.tasks.sgg.data import load_raw
from r1vision.tasks.sgg.parse import parse_scene_graph
from r1vision.tasks.sgg.rewards import format_score
from r1vision.tasks.sgg.scorer import SGGScorer
from r1vision.tasks.sgg.task import SGGTask
from r1vision.tasks.sgg.viz import render_sgg
from r1vision.trainer.flops import format_flops
from r1vision.vision.images import load_image
from r1vision.vision.records import read_predictions

ARMS = ("sft", "sft_matched", "sft+grpo")
ARM_TITLES = {
    "sft": "SFT checkpoint",
    "sft_matched": "SFT continued (compute-matched)",
    "sft+grpo": "SFT + GRPO",
}
# (key, column title, is a fraction shown in percent)
COLUMNS = (
    ("format", "format valid", True),
    ("object_f1", "object F1", True),
    ("relation_recall", "relation recall", True),
    ("R@50", "R@50 (graph-constr.)", True),
    ("relation_f1", "relation F1", True),
    ("exact", "exact graph", True),
    ("reward", "reward mean (of 3)", False),
)
HEADLINE = "relation_recall"  # the no-graph-constraint recall: GT pairs here often carry two predicates


def evaluate_arm(model_dir: str, data: Path, split: str, out_dir: Path, cfg: DemoConfig) -> dict[str, float]:
    """Greedy predictions for ``split`` (``r1vision infer``), scored by ``r1vision eval sgg`` and the F1 rewards."""

    task, opts = SGGTask(), task_options(cfg)
    run_inference(
        task,
        opts,
        model_dir,
        str(data),
        out_dir,
        split=split,
        batch_size=cfg.eval_batch,
        options=SamplingOptions(max_new_tokens=cfg.max_new_tokens),
        max_pixels=cfg.max_pixels,
        progress=False,
    )
    sgg = task.evaluate_files(str(data), str(out_dir), split, opts, run_context(cfg))
    raw, _ = load_raw(str(data), split)
    raw = raw.select_columns(["objects", "relationships"])
    by_index = {int(r["index"]): r for r in read_predictions(out_dir)}
    scorer = SGGScorer(FAMILY, budget=run_context(cfg).budget)
    w = cfg.reward_weights
    rows: dict[str, list[float]] = {k: [] for k in ("format", "object_f1", "relation_f1", "exact", "reward")}
    for i, gt in enumerate(raw):
        rec = by_index.get(i, {})
        text = rec.get("completion", "")
        size = rec.get("original_image_size")
        f1 = scorer.f1(text, gt["objects"], gt["relationships"], size, rec.get("image_size"))
        parsed = parse_scene_graph(text)
        fmt = format_score(text, parsed, strict=True)  # "format valid": the strict check for every arm
        rows["format"].append(fmt)
        fmt = fmt if cfg.strict_format else format_score(text, parsed, strict=False)  # as GRPO is paid
        rows["object_f1"].append(f1.object_f1)
        rows["relation_f1"].append(f1.relation_f1)
        rows["exact"].append(float(f1.exact))
        rows["reward"].append(w["format"] * fmt + w["node_f1"] * f1.object_f1 + w["edge_f1"] * f1.relation_f1)
    metrics = {k: float(np.mean(v)) if v else 0.0 for k, v in rows.items()}
    metrics["relation_recall"] = float(sgg.metrics["ngR@50"])
    metrics["R@50"] = float(sgg.metrics["R@50"])
    metrics["parse_failure_rate"] = float(sgg.metrics["parse_failure_rate"])
    metrics["num_images"] = float(len(raw))
    return metrics


def _fmt(values: Sequence[float], percent: bool) -> str:
    scale = 100.0 if percent else 1.0
    vals = [scale * v for v in values]
    if len(vals) == 1:
        return f"{vals[0]:.1f}" if percent else f"{vals[0]:.3f}"
    mean, std = float(np.mean(vals)), float(np.std(vals, ddof=1))
    return f"{mean:.1f} ± {std:.1f}" if percent else f"{mean:.3f} ± {std:.3f}"


def results_table(
    results: Sequence[dict[str, Any]], split: str, columns: Sequence[tuple[str, str, bool]] = COLUMNS
) -> list[str]:
    """Markdown rows: one per arm, mean ± std over the seeds in ``results`` (percent where ``columns``
    says so)."""
    head = "| arm | " + " | ".join(title for _, title, _ in columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 1)]
    for arm in ARMS:
        cells = [_fmt([r["eval"][split][arm][key] for r in results], pct) for key, _, pct in columns]
        lines.append(f"| {ARM_TITLES[arm]} | " + " | ".join(cells) + " |")
    return lines


def verdicts(results: Sequence[dict[str, Any]], headline: str = HEADLINE) -> dict[str, dict[str, Any]]:
    """Differences (points of the ``headline`` metric) that answer the demo's two questions, per split: the
    mean over seeds and the per-seed values."""
    out: dict[str, dict[str, Any]] = {}
    for split in ("test", "test_ood"):

        def diffs(a: str, b: str, split: str = split) -> list[float]:
            return [100 * (r["eval"][split][a][headline] - r["eval"][split][b][headline]) for r in results]

        vs_sft, vs_matched = diffs("sft+grpo", "sft"), diffs("sft+grpo", "sft_matched")
        out[split] = {
            "grpo_minus_sft": float(np.mean(vs_sft)),
            "grpo_minus_matched": float(np.mean(vs_matched)),
            "per_seed_minus_matched": vs_matched,
        }
    return out


def _against_matched(per_seed: Sequence[float]) -> str:
    """RL "beats" compute-matched SFT only when every seed agrees; a mean alone can be one lucky seed."""
    mean = float(np.mean(per_seed))
    if mean <= 0:
        return "RL does NOT beat compute-matched SFT."
    if len(per_seed) == 1:
        return "RL is ahead of compute-matched SFT on this one seed (run --seeds 3 to know if it holds)."
    if all(d > 0 for d in per_seed):
        return "RL beats compute-matched SFT on every seed."
    seeds = ", ".join(f"{d:+.1f}" for d in per_seed)
    return f"RL is ahead on average but not on every seed ({seeds}): no established advantage."


def verdict_lines(
    results: Sequence[dict[str, Any]], headline: str = HEADLINE, label: str = "relation recall"
) -> list[str]:
    """Plain sentences saying whether RL helped, including when it did not."""
    names = {"test": "i.i.d. test", "test_ood": "OOD test"}
    lines = []
    for split, d in verdicts(results, headline).items():
        g, m = d["grpo_minus_sft"], d["grpo_minus_matched"]
        lines.append(
            f"- {names[split]}: GRPO changed {label} by {g:+.1f} points over its SFT checkpoint "
            f"({'meets' if g >= 5 else 'misses'} the +5 target); vs compute-matched SFT: {m:+.1f} points — "
            + _against_matched(d["per_seed_minus_matched"])
        )
    lines += input_independence_lines(results)
    flat = [r["seed"] for r in results if r.get("reward_curve_flat")]
    if flat:
        lines.append(f"- the GRPO reward curve stayed flat for seed(s) {flat}: RL learned little there.")
    return lines


def distinct_share(pred_dir: str | Path) -> float:
    """Distinct completions / predictions: 1.0 when every input got its own output; a model that writes the
    same text for every input reads 1/N however high its reward."""

    texts = [str(r.get("completion", "")).strip() for r in read_predictions(pred_dir)]
    return len(set(texts)) / max(len(texts), 1)


def input_independence_lines(results: Sequence[dict[str, Any]], floor: float = 0.5) -> list[str]:
    """A verdict line per split where an arm's outputs barely depend on its input (``distinct`` < ``floor``,
    mean over seeds): a reward gain there is a better guess that ignores the input, not input reading."""
    names = {"test": "i.i.d. test", "test_ood": "OOD test"}
    lines = []
    for split in ("test", "test_ood"):
        low = []
        for arm in ARMS:
            shares = [r["eval"][split][arm].get("distinct") for r in results]
            if shares and all(v is not None for v in shares) and float(np.mean(shares)) < floor:
                low.append(f"{ARM_TITLES[arm]} {100 * float(np.mean(shares)):.0f}%")
        if low:
            lines.append(
                f"- {names[split]}: distinct outputs per input are low ({', '.join(low)}): these arms write "
                "(nearly) the same output whatever the input, so their scores measure a fixed guess, not input "
                "reading; a gain between such arms is not evidence that RL taught the model to read the input."
            )
    return lines


def _flops(result: dict[str, Any], arm: str) -> str:
    """`` / 1.2 TFLOP`` for records that count FLOPs (records from before the FLOP match do not)."""
    flops = result.get("flops", {}).get(arm)
    return "" if flops is None else f" / {format_flops(flops)}"


def write_tables(out: Path, results: Sequence[dict[str, Any]], cfg: DemoConfig) -> str:
    """The scene-graph demo's ``eval_table.md`` and ``eval.json``; returns the markdown."""
    held = ", ".join(f"'{n}'" for n in cfg.held_out) or "(none)"
    intro = [
        f"SFT on scenes with 1-{cfg.sft_max_objects} objects in which the colour-shape pairs {held} are "
        + (
            f"rare ({cfg.held_out_sft_rate:g} x their natural rate)"
            if cfg.held_out_sft_rate
            else "never drawn"
        )
        + f"; GRPO prompts ({cfg.rl_objects[0]}-{cfg.rl_objects[1]} objects) show every pair; the "
        "compute-matched arm continues SFT (same data, linear decay) for GRPO's counted model FLOPs. Greedy decoding "
        "on held-out scenes; percentages" + (", mean ± std over seeds." if len(results) > 1 else "."),
        "relation recall = ngR@50 of `r1vision eval sgg` (no graph constraint: a pair here may carry both "
        "'left of' and 'above'); reward = format + object F1 + relation F1 (max 3), format "
        + ("strict" if cfg.strict_format else "lenient (0.25 per check)")
        + "; 'format valid' is the strict check.",
    ]
    titles = {
        "test": "i.i.d. test (drawn like the SFT data)",
        "test_ood": f"OOD test (every scene has a held-out pair; {cfg.ood_objects[0]}-{cfg.ood_objects[1]} objects)",
    }
    return write_report(out, results, "SFT -> GRPO on synthetic scene graphs", intro, titles, cfg.to_dict())


def write_report(
    out: Path,
    results: Sequence[dict[str, Any]],
    title: str,
    intro: Sequence[str],
    split_titles: dict[str, str],
    config: dict[str, Any],
    columns: Sequence[tuple[str, str, bool]] = COLUMNS,
    headline: str = HEADLINE,
    label: str = "relation recall",
) -> str:
    """``eval_table.md`` (a table per split, the verdicts, the timing) and ``eval.json``; returns the markdown."""
    seeds = [r["seed"] for r in results]
    md = [f"# r1vision demo: {title} (seeds {seeds})", "", *intro]
    for split, split_title in split_titles.items():
        md += ["", f"## {split_title}", "", *results_table(results, split, columns)]
    md += ["", "## Verdict", "", *verdict_lines(results, headline, label), ""]
    timing = [
        f"- seed {r['seed']}: demo {r['seconds']['total']:.0f}s (SFT {r['seconds']['sft']:.0f}s, GRPO "
        f"{r['seconds']['grpo']:.0f}s / {r['steps']['grpo']} steps{_flops(r, 'grpo')}, matched SFT "
        f"{r['seconds']['sft_matched']:.0f}s / {r['steps']['sft_matched']} steps{_flops(r, 'sft_matched')})"
        for r in results
    ]
    md += ["## Timing", "", *timing, ""]
    text = "\n".join(md)
    (out / "eval_table.md").write_text(text)
    import torch

    summary = {
        "seeds": seeds,
        "torch_threads": torch.get_num_threads(),  # float summation order, hence the numbers, depend on it
        "config": config,
        "headline_metric": headline,
        "verdicts": verdicts(results, headline),
        "runs": list(results),
    }
    (out / "eval.json").write_text(json.dumps(summary, indent=2, default=str))
    return text


def collect_metrics(out: Path, stages: dict[str, str], seed: int) -> list[dict[str, Any]]:
    """Rows of every stage's ``metrics.csv`` with ``seed`` and ``stage`` columns."""
    rows = []
    for stage, folder in stages.items():
        path = Path(folder) / "metrics.csv"
        if path.exists():
            with path.open(newline="") as f:
                rows += [{"seed": seed, "stage": stage, **r} for r in csv.DictReader(f)]
    return rows


def write_metrics_csv(out: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """One ``metrics.csv`` for all seeds and stages (columns: the union of the stages' columns)."""
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    path = out / "metrics.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns or ["seed", "stage", "step"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def reward_curve(rows: Sequence[dict[str, Any]]) -> dict[int, tuple[list[float], list[float]]]:
    """(steps, reward) of the GRPO stage per seed."""
    curves: dict[int, tuple[list[float], list[float]]] = {}
    for r in rows:
        if r["stage"] == "sft+grpo" and not math.isnan(_float(r.get("reward"))):
            steps, values = curves.setdefault(int(r["seed"]), ([], []))
            steps.append(_float(r["step"]))
            values.append(_float(r["reward"]))
    return curves


def is_flat(values: Sequence[float], tol: float = 0.05) -> bool:
    """True when the last quarter's mean reward is within ``tol`` of the first quarter's."""
    if len(values) < 4:
        return False
    q = max(1, len(values) // 4)
    return abs(float(np.mean(values[-q:])) - float(np.mean(values[:q]))) < tol


def plot_reward_curve(
    out: Path, rows: Sequence[dict[str, Any]], ylabel: str = "mean reward (format + object F1 + relation F1)"
) -> Path:
    """``reward_curve.png``: GRPO training reward per step (raw and a moving average) for each seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for seed, (steps, values) in sorted(reward_curve(rows).items()):
        line = ax.plot(steps, values, alpha=0.3)[0]
        k = max(1, len(values) // 10)
        smooth = np.convolve(values, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1 :], smooth, color=line.get_color(), label=f"seed {seed}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(ylabel)
    ax.set_title("GRPO training reward")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "reward_curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw_predictions(
    out: Path, data: Path, preds: dict[str, Path], split: str, n: int, cfg: DemoConfig
) -> list[Path]:
    """``r1vision viz sgg`` pictures of the first ``n`` rows of ``split`` for each arm."""

    raw, root = load_raw(str(data), split)
    paths = []
    for arm, pred_dir in preds.items():
        by_index = {int(r["index"]): r for r in read_predictions(pred_dir)}
        for i in range(min(n, len(raw))):
            row = raw[i]
            text = by_index.get(i, {}).get("completion")
            target = out / f"{split}_{i}_{arm.replace('+', '_')}.png"
            paths.append(
                render_sgg(
                    load_image(row["image"], root),
                    row["objects"],
                    row["relationships"],
                    text,
                    target,
                    model_family=FAMILY,
                    budget=run_context(cfg).budget,
                )
            )
    return paths
