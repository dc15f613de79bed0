"""The ``r1vision eval`` runner: ground truth through the task's loader, predictions from records on disk."""

from __future__ import annotations

from typing import Any

from r1vision.tasks.base import EvalResult, Task
from r1vision.vision.records import read_predictions, row_id


class PredictionMismatchError(ValueError):
    """Prediction records name other rows than the ground truth at the same index (e.g. another split)."""


def evaluate_files(task: Task, gt: str, pred: str, split: str = "test", **kwargs: Any) -> EvalResult:
    """Default ``r1vision eval``: load ground truth with ``task.load``, align predictions by ``index``.

    Records carry the id of the row they answer (``id``, else ``image_id``); a record whose id differs from
    the ground-truth row at its index is an error naming both, so predictions of one split are never
    scored against another. Tasks with their own prediction formats (e.g. R1-SGG's gathered json) define
    ``evaluate_files(self, gt, pred, split, **kwargs)`` and are called instead.
    """
    custom = getattr(task, "evaluate_files", None)
    if callable(custom):
        return custom(gt, pred, split=split, **kwargs)
    rows = task.load(gt, split=split, **kwargs)
    preds = read_predictions(pred)
    by_index = {int(r["index"]): r for r in preds}
    check_ids(rows, by_index, gt, pred)
    # Several samples per row (``--num-samples``) are passed as a list: tasks score pass@k from them.
    completions = [
        (by_index[i].get("samples") or by_index[i]["completion"]) if i in by_index else ""
        for i in range(len(rows))
    ]
    result = task.evaluate([rows[i] for i in range(len(rows))], completions, **kwargs)
    result.metrics.setdefault("num_items", float(len(rows)))
    result.metrics.setdefault(
        "missing_predictions", float(sum(1 for i in range(len(rows)) if i not in by_index))
    )
    return result


def check_ids(rows: Any, by_index: dict[int, dict[str, Any]], gt: str, pred: str) -> None:
    """Raise :class:`PredictionMismatchError` when records fall outside ``rows`` or name other rows."""
    extra = sorted(i for i in by_index if i >= len(rows))
    if extra:
        raise PredictionMismatchError(
            f"{pred}: {len(extra)} record(s) have an index beyond the {len(rows)} ground-truth rows of {gt} "
            f"(first: {extra[0]}); were the predictions made on another split?"
        )
    for i, record in sorted(by_index.items()):
        if "id" not in record:
            continue
        expected = row_id(rows[i], i)
        if str(record["id"]) != str(expected):
            raise PredictionMismatchError(
                f"{pred}: the record at index {i} answers row id {record['id']!r}, but ground-truth row {i} "
                f"of {gt} has id {expected!r}; were the predictions made on another split?"
            )
