"""``r1vision report``: runs (e.g. seeds) → a figure per metric group, a table and an index page.

Reads the ``metrics.csv`` every r1vision run writes and aligns the runs by ``step``. Each metric group gets
one figure with integer steps: the rewards (every ``rewards/<name>/mean`` on one axis), completion length
(mean with the min-max range), KL, entropy, the share of zero-std groups, step time, loss, learning rate,
gradient norm, MAYE's metrics and any other column. Bands: over several runs, ± the std across runs (MAYE
reports seeds this way); for one run, the per-step std the trainer logged (``reward_std``,
``rewards/<name>/std``) or the min-max range. ``report.md`` has the table (mean over steps, max of the mean
curve, final value); ``index.html`` shows every figure with each run's settings (``r1vision_run.json``).
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path

DEFAULT_METRICS = (
    "reward",
    "rewards/accuracy/mean",
    "maye/response_length/mean",
    "maye/reflection_analysis/reflection_ratio",
)
# Columns drawn as a band around another, not on their own.
_BAND_SUFFIXES = ("/std", "/min_length", "/max_length")
_BAND_COLUMNS = {"reward_std"}


def read_run(path: str | Path) -> dict[str, dict[int, float]]:
    """``{metric: {step: value}}`` from a run folder (its ``metrics.csv``) or a CSV file."""
    p = Path(path)
    p = p / "metrics.csv" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"no metrics.csv at {path}")
    out: dict[str, dict[int, float]] = {}
    with p.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                step = int(float(row.get("step") or "nan"))
            except ValueError:
                continue
            for key, value in row.items():
                if key in ("step", "epoch") or value in (None, ""):
                    continue
                try:
                    number = float(value)
                except ValueError:
                    continue
                if math.isfinite(number):
                    out.setdefault(key, {})[step] = number
    return out


def aggregate(
    runs: Sequence[dict[str, dict[int, float]]], metric: str
) -> list[tuple[int, float, float, int]]:
    """Per step: (step, mean, std over the runs that logged it, number of runs)."""
    steps = sorted({s for run in runs for s in run.get(metric, {})})
    rows = []
    for step in steps:
        values = [run[metric][step] for run in runs if step in run.get(metric, {})]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        rows.append((step, mean, std, len(values)))
    return rows


def metric_groups(available: Sequence[str]) -> dict[str, list[str]]:
    """Figure title -> the metrics drawn in it, for every column of the runs (band columns excluded)."""
    names = [m for m in available if not m.endswith(_BAND_SUFFIXES) and m not in _BAND_COLUMNS]
    groups: dict[str, list[str]] = {}
    rewards = [m for m in names if m.startswith("rewards/") and m.endswith("/mean")]
    if "reward" in names or rewards:
        groups["rewards"] = (["reward"] if "reward" in names else []) + rewards
    fixed = {
        "completions/mean_length": "completion length",
        "kl": "KL",
        "entropy": "entropy",
        "frac_reward_zero_std": "share of zero-std groups",
        "step_time": "step time (s)",
        "loss": "loss",
        "learning_rate": "learning rate",
        "grad_norm": "gradient norm",
    }
    for metric, title in fixed.items():
        if metric in names:
            groups[title] = [metric]
    used = {m for ms in groups.values() for m in ms}
    for metric in names:
        if metric not in used and not metric.startswith("completions/"):
            groups[metric] = [metric]
    return groups


def _band(
    runs: Sequence[dict[str, dict[int, float]]],
    metric: str,
    steps: list[int],
    means: list[float],
    stds: list[float],
) -> tuple[list[float], list[float], str] | None:
    """(low, high, label) of the band drawn around ``metric``."""
    if len(runs) > 1:
        return (
            [m - s for m, s in zip(means, stds, strict=True)],
            [m + s for m, s in zip(means, stds, strict=True)],
            (f"± std over {len(runs)} runs"),
        )
    run = runs[0]
    stem = metric[: -len("/mean")] if metric.endswith("/mean") else metric
    for std_key in (f"{stem}/std", f"{metric}_std"):
        if std_key in run:
            s = [run[std_key].get(step, 0.0) for step in steps]
            return (
                [m - x for m, x in zip(means, s, strict=True)],
                [m + x for m, x in zip(means, s, strict=True)],
                ("± std within the step"),
            )
    if metric == "completions/mean_length" and "completions/min_length" in run:
        low = [run["completions/min_length"].get(step, m) for step, m in zip(steps, means, strict=True)]
        high = [run["completions/max_length"].get(step, m) for step, m in zip(steps, means, strict=True)]
        return low, high, "min-max"
    return None


def report(run_dirs: Sequence[str | Path], out_dir: str | Path, metrics: Sequence[str] | None = None) -> str:
    """Write one PNG per metric group, ``report.md`` and ``index.html`` into ``out_dir``; return the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = [read_run(d) for d in run_dirs]
    available = sorted({m for run in runs for m in run})
    if metrics:
        missing = [m for m in metrics if m not in available]
        if missing:
            raise KeyError(f"metric(s) {missing} not in these runs; available: {available}")
        groups = {m: [m] for m in metrics}
    else:
        groups = metric_groups(available)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{len(runs)} run(s): " + ", ".join(str(d) for d in run_dirs),
        "",
        "| metric | mean over steps | max of the mean curve | at step | final (mean ± std) |",
        "|---|---|---|---|---|",
    ]
    figures = []
    for title, members in groups.items():
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for metric in members:
            curve = aggregate(runs, metric)
            if not curve:
                continue
            steps, means, stds = [c[0] for c in curve], [c[1] for c in curve], [c[2] for c in curve]
            best = max(range(len(means)), key=means.__getitem__)
            lines.append(
                f"| {metric} | {sum(means) / len(means):.4f} | {means[best]:.4f} | {steps[best]} | "
                f"{means[-1]:.4f} ± {stds[-1]:.4f} |"
            )
            label = metric.removeprefix("rewards/").removesuffix("/mean")
            (line,) = ax.plot(
                steps, means, marker="o" if len(steps) < 30 else None, markersize=3, label=label
            )
            band = _band(runs, metric, steps, means, stds)
            if band is not None:
                ax.fill_between(
                    steps, band[0], band[1], alpha=0.25, color=line.get_color(), label=f"{label} {band[2]}"
                )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=7)
        fig.tight_layout()
        name = title.replace("/", "_").replace(" ", "_").replace("(", "").replace(")", "") + ".png"
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        figures.append((title, name))
    table = "\n".join(lines) + "\n"
    (out / "report.md").write_text(table)
    _index(out, run_dirs, figures, table)
    return table


def _index(out: Path, run_dirs: Sequence[str | Path], figures: list[tuple[str, str]], table: str) -> None:
    """``index.html``: every figure on one page, with each run's settings and the table."""
    parts = [
        "<!doctype html><meta charset='utf-8'><title>r1vision report</title>",
        "<style>body{font-family:sans-serif;margin:1.5em} img{width:31%;min-width:380px;margin:.3em} "
        "pre{background:#f4f4f4;padding:.6em;overflow:auto;font-size:12px} td,th{padding:2px 8px}</style>",
        f"<h1>r1vision report: {len(run_dirs)} run(s)</h1><div>",
    ]
    parts += [
        f"<img src='{html.escape(name)}' alt='{html.escape(title)}' title='{html.escape(title)}'>"
        for title, name in figures
    ]
    parts.append("</div><h2>Table</h2><pre>" + html.escape(table) + "</pre><h2>Runs</h2>")
    for run in run_dirs:
        settings = Path(run) / "r1vision_run.json"
        text = settings.read_text() if settings.is_file() else "(no r1vision_run.json)"
        try:
            text = json.dumps(json.loads(text), indent=1, sort_keys=True)
        except ValueError:
            pass
        parts.append(f"<h3>{html.escape(str(run))}</h3><pre>{html.escape(text)}</pre>")
    (out / "index.html").write_text("\n".join(parts))
