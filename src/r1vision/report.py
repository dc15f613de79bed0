"""``r1vision report``: runs (e.g. seeds) → mean ± std curves per metric and a table of mean and max.

MAYE reports each training metric as a curve averaged over seeds with a ±std band, and a table with
the mean and the maximum over evaluation points. This reads the ``metrics.csv`` every r1vision run
writes, aligns the runs by ``step`` and does exactly that.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

DEFAULT_METRICS = (
    "reward",
    "rewards/accuracy/mean",
    "maye/response_length/mean",
    "maye/reflection_analysis/reflection_ratio",
)


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


def report(run_dirs: Sequence[str | Path], out_dir: str | Path, metrics: Sequence[str] | None = None) -> str:
    """Write one PNG per metric and ``report.md`` into ``out_dir``; return the markdown table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [read_run(d) for d in run_dirs]
    available = sorted({m for run in runs for m in run})
    wanted = list(metrics) if metrics else [m for m in DEFAULT_METRICS if m in available] or available[:6]
    missing = [m for m in wanted if m not in available]
    if missing:
        raise KeyError(f"metric(s) {missing} not in these runs; available: {available}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"{len(runs)} run(s): " + ", ".join(str(d) for d in run_dirs), "",
             "| metric | mean over steps | max of the mean curve | at step | final (mean ± std) |",
             "|---|---|---|---|---|"]  # fmt: skip
    for metric in wanted:
        curve = aggregate(runs, metric)
        steps = [c[0] for c in curve]
        means = [c[1] for c in curve]
        stds = [c[2] for c in curve]
        best = max(range(len(means)), key=means.__getitem__)
        lines.append(f"| {metric} | {sum(means) / len(means):.4f} | {means[best]:.4f} | {steps[best]} | "
                     f"{means[-1]:.4f} ± {stds[-1]:.4f} |")  # fmt: skip
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(steps, means, label=f"mean of {len(runs)} run(s)")
        ax.fill_between(steps, [m - s for m, s in zip(means, stds, strict=True)], [m + s for m, s in zip(means, stds, strict=True)],
                        alpha=0.25, label="± std")  # fmt: skip
        ax.set_xlabel("step")
        ax.set_title(metric)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / (metric.replace("/", "_") + ".png"), dpi=100)
        plt.close(fig)
    table = "\n".join(lines) + "\n"
    (out / "report.md").write_text(table)
    return table
