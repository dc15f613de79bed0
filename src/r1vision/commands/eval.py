"""Score predictions (an infer folder or file) against the ground truth with the task's evaluator."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("eval", __doc__)
    add(p, "--task", required=True, help="task name (see `r1vision tasks`)")
    add(p, "--dataset", required=True, help="ground truth: Hub id, folder or file")
    add(p, "--pred", required=True, help="predictions: an infer output folder or a file")
    add(p, "--split", default="test")
    add(p, "--json_out", default=None, help="write the metrics as JSON")
    add(p, "--records_out", default=None, help="write per-item verdicts as jsonl")
    add(p, "--compat", default=None, help="reproduce another project's evaluator (sgg: r1sgg)")
    add(p, "--contact_sheet", default=None, help="svg: PNG of ground truth vs prediction with scores")
    add(p, "--model_family", default=None, help="box frame when the records do not name it")
    add(p, "--min_pixels", type=int, default=None)
    add(p, "--max_pixels", type=int, default=None)
    add(p, "--task_options", default=None, help="JSON object of the task's options")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.commands._precheck import check_paths

    check_paths(a, dataset="dataset file or folder", pred="prediction file or folder")
    from r1vision.commands._task import run_context, task_and_options

    # --compat and --contact_sheet are task options with a flag of their own
    flags = {k: getattr(a, k) for k in ("compat", "contact_sheet") if getattr(a, k) is not None}
    task, opts = task_and_options(a.task, a.task_options, flags)
    result = task.evaluate_files(
        a.dataset, a.pred, a.split, opts, run_context(a.model_family, a.min_pixels, a.max_pixels)
    )
    print(f"{a.task} on {a.dataset} ({a.split}), predictions {a.pred}:")
    width = max((len(k) for k in result.metrics), default=10)
    for key, value in result.metrics.items():
        shown = f"{int(value)}" if float(value).is_integer() else f"{value:.4f}"
        print(f"  {key:<{width}}  {shown}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result.metrics, f, indent=2)
    if a.records_out:
        with open(a.records_out, "w") as f:
            for record in result.records:
                f.write(json.dumps(record, default=str) + "\n")
    return 0
