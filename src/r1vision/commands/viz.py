"""Draw predictions against the ground truth (scene graphs: boxes and both graphs per image)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("viz", __doc__)
    add(p, "--task", required=True, help="task name (sgg, sgg_psg)")
    add(p, "--dataset", required=True, help="dataset with images (Hub id, folder or file)")
    add(
        p,
        "--pred",
        default=None,
        help="r1vision infer output (folder or jsonl); omit for the ground truth only",
    )
    add(p, "--split", default="val")
    add(p, "--index", minimum=0, type=int, nargs="+", default=[0], help="row indices to draw")
    add(p, "--output_dir", required=True, help="output folder for the PNGs")
    add(p, "--model_family", default=None, help="box frame when the records do not name it")
    add(p, "--task_options", default=None, help="JSON object of the task's options")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.commands._args import UsageError
    from r1vision.commands._precheck import check_paths

    check_paths(a, dataset="dataset file or folder", pred="prediction file or folder")
    from r1vision.commands._task import run_context, task_and_options

    task, opts = task_and_options(a.task, a.task_options)
    try:
        paths = task.visualize(
            a.dataset, a.pred, a.index, a.output_dir, a.split, opts, run_context(a.model_family, None, None)
        )
    except (NotImplementedError, IndexError) as exc:  # no drawing for the task, or --index out of range
        raise UsageError(str(exc).strip("'\"")) from None
    for path in paths:
        print(f"wrote {path}")
    return 0
