"""Score given completions with the task's rewards, exactly as GRPO training would (debug a reward).

Each line of ``--completions`` is a JSON object with ``index`` (the row of ``--split``) and ``completion``
(the text); other keys are ignored, so an ``r1vision infer`` shard can be passed as it is. The rows, model
family, pixel budget and box frame come from ``--model`` and ``--dataset`` as in ``r1vision grpo``; the
task, its options and the rewards with their weights default to the training run's
(``r1vision_run.json``) when ``--model`` is an r1vision output. Prints each reward's mean and the weighted
total; ``--json_out`` writes one object per line: ``index``, each reward's unweighted value, ``total``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("score", __doc__)
    add(p, "--task", default=None, help="task name (default: the one in the model's r1vision_run.json)")
    add(p, "--model", required=True, help="Hub id or local folder: its family, budget and tokenizer")
    add(p, "--dataset", required=True, help="Hub id, local folder or file")
    add(p, "--split", default="test")
    add(p, "--completions", required=True, help="JSON lines with 'index' and 'completion'")
    add(p, "--task_options", default=None, help="JSON object of the task's options (merged into the run's)")
    add(p, "--reward_funcs", nargs="+", default=None, help="as grpo's (default: the run's, else the task's)")
    add(p, "--reward_weights", nargs="+", type=float, default=None, help="as grpo's, one per reward")
    add(p, "--min_pixels", type=int, default=None)
    add(p, "--max_pixels", type=int, default=None)
    add(p, "--max_completion_length", type=int, default=None, help="as training's (truncation rewards)")
    add(p, "--json_out", default=None, help="write the per-line values as a JSON list")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.commands._precheck import check_paths

    check_paths(a, model="model folder", dataset="dataset file or folder", completions="completions file")
    from r1vision.commands._args import UsageError
    from r1vision.runners.infer import inference_settings
    from r1vision.runners.score import score_file, write_scores
    from r1vision.tasks import get_task
    from r1vision.tasks.options import options_mapping
    from r1vision.trainer.run_info import read_run_info

    given = options_mapping(a.task_options) if a.task_options else None
    try:
        settings = inference_settings(a.model, a.task, 1, given, a.min_pixels, a.max_pixels)
    except ValueError as exc:  # no task named anywhere
        raise UsageError(str(exc)) from None
    saved = read_run_info(a.model)
    funcs, weights = a.reward_funcs, a.reward_weights
    if (
        funcs is None
        and weights is None
        and saved.get("task") == settings["task"]
        and saved.get("reward_weights")
    ):
        funcs, weights = list(saved["reward_weights"]), [float(v) for v in saved["reward_weights"].values()]
    task = get_task(settings["task"])
    opts = task.parse_options(settings["task_options"])
    specs, used, records = score_file(
        task,
        opts,
        a.model,
        a.dataset,
        a.split,
        a.completions,
        funcs,
        weights,
        settings["min_pixels"],
        settings["max_pixels"],
        a.max_completion_length,
    )
    print(
        f"{task.name} rewards of {len(records)} completion(s) from {a.completions} ({a.dataset}, {a.split}):"
    )
    width = max(len(name) for name in [*(s.name for s in specs), "total"])
    for spec, weight in zip(specs, used, strict=True):
        print(f"  {spec.name:<{width}}  {_mean([r[spec.name] for r in records]):.4f}   (weight {weight:g})")
    print(f"  {'total':<{width}}  {_mean([r['total'] for r in records]):.4f}   (weighted sum)")
    if a.json_out:
        write_scores(a.json_out, records)
        print(f"per-line values in {a.json_out}", file=sys.stderr)
    return 0


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return math.fsum(finite) / len(finite) if finite else math.nan
