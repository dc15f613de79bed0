"""The embedded demo over several seeds: wall time against the 10-minute target and the three arms.

Runs ``r1vision demo`` once per seed (the seeds run one after the other, as a user would), then prints a
markdown table with mean ± std per arm on the i.i.d. and OOD splits, the demo's wall time per seed
against the target, and rows comparing SFT + GRPO with its SFT checkpoint and with compute-matched SFT
(differences in points and ratios, measured in the same run). Writes the numbers as JSON.

    PYTHONPATH=src python benchmarks/bench_demo.py [--seeds 3] [--quick] [--out bench_demo_out]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from machine_info import describe

from r1vision.demo import run_demo
from r1vision.demo.report import ARM_TITLES, ARMS, HEADLINE, results_table

TARGET_SECONDS = 600.0


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick", action="store_true", help="the smoke-run demo (checks the benchmark, not learning)"
    )
    p.add_argument("--out", default="bench_demo_out")
    p.add_argument("--json", default=None, help="where to write the JSON (default: OUT/bench_demo.json)")
    a = p.parse_args(argv)
    out = Path(a.out)
    before = describe()
    start = time.perf_counter()
    run_demo(str(out), a.seed, a.seeds, quick=a.quick, quiet=True)
    wall = time.perf_counter() - start
    summary = json.loads((out / "eval.json").read_text())
    runs = summary["runs"]
    per_seed = [r["seconds"]["total"] for r in runs]
    lines = [f"## r1vision demo benchmark ({len(runs)} seeds{', quick' if a.quick else ''})", ""]
    lines.append(f"machine: {before} (before) / {describe()} (after)")
    lines += ["", "| measure | value | target |", "|---|---|---|"]
    ok = max(per_seed) <= TARGET_SECONDS
    lines.append(f"| demo wall time per seed (s) | {_mean_std(per_seed)} (max {max(per_seed):.0f}) | "
                 f"≤ {TARGET_SECONDS:.0f} {'(met)' if ok else '(NOT met)'} |")  # fmt: skip
    for stage in ("sft", "grpo", "sft_matched"):
        lines.append(f"| {stage} training time (s) | {_mean_std([r['seconds'][stage] for r in runs])} | |")
    for split, name in (("test", "i.i.d."), ("test_ood", "OOD")):
        sft = [100 * r["eval"][split]["sft"][HEADLINE] for r in runs]
        grpo = [100 * r["eval"][split]["sft+grpo"][HEADLINE] for r in runs]
        matched = [100 * r["eval"][split]["sft_matched"][HEADLINE] for r in runs]
        gain = [g - s for g, s in zip(grpo, sft, strict=True)]
        edge = [g - m for g, m in zip(grpo, matched, strict=True)]
        lines.append(f"| {name} relation recall: GRPO − SFT checkpoint (points) | {_mean_std(gain)} | ≥ +5 "
                     f"{'(met)' if np.mean(gain) >= 5 else '(NOT met)'} |")  # fmt: skip
        lines.append(f"| {name} relation recall: GRPO − compute-matched SFT (points) | {_mean_std(edge)} | > 0 "
                     f"{'(met)' if np.mean(edge) > 0 else '(NOT met)'} |")  # fmt: skip
        ratio = [g / m if m > 0 else float("nan") for g, m in zip(grpo, matched, strict=True)]
        lines.append(f"| {name} relation recall ratio GRPO / compute-matched SFT | "
                     f"{np.nanmean(ratio):.2f} | > 1 |")  # fmt: skip
    for split, title in (("test", "i.i.d. test"), ("test_ood", "OOD test")):
        lines += ["", f"### {title} (percent, mean ± std over seeds)", "", *results_table(runs, split)]
    text = "\n".join(lines)
    print(text)
    payload = {
        "machine": describe(),
        "seeds": summary["seeds"],
        "quick": a.quick,
        "wall_seconds": wall,
        "per_seed_seconds": per_seed,
        "target_seconds": TARGET_SECONDS,
        "arms": {
            split: {
                ARM_TITLES[arm]: {
                    key: [r["eval"][split][arm][key] for r in runs] for key in runs[0]["eval"][split][arm]
                }
                for arm in ARMS
            }
            for split in ("test", "test_ood")
        },
        "verdicts": summary["verdicts"],
        "markdown": text,
    }
    path = Path(a.json) if a.json else out / "bench_demo.json"
    path.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
