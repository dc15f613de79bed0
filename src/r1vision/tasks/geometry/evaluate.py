"""Evaluation of the ``geometry`` task: accuracy (pass@k), per-item verdicts and MAYE's reflection metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from r1vision.tasks.base import EvalResult
from r1vision.tasks.common import completion_text
from r1vision.tasks.geometry.extract import extract_final_answer, parse_choices
from r1vision.tasks.geometry.metrics import generation_step_metrics, mean_pass_at_k, pass_at_k
from r1vision.tasks.geometry.verify import DEFAULT_TIMEOUT_S, answers_match


def evaluate_geometry(
    rows: Sequence[dict[str, Any]],
    completions: Sequence[str | Sequence[str]],
    lengths: Sequence[int | Sequence[int]] | None = None,
    max_length: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> EvalResult:
    """Accuracy (pass@k when a row has k completions), per-item verdicts and reflection metrics.

    ``completions[i]`` is one string or a list of k samples for ``rows[i]``. ``lengths`` (token counts,
    same shape) adds the mean length and the clip ratio at ``max_length``. Metrics: ``accuracy``
    (any-correct, MAYE's pass@k), ``mean_sample_accuracy``, ``pass@1_unbiased`` and the
    reflection metrics over all samples.
    """
    if len(rows) != len(completions):
        raise ValueError(f"evaluate: {len(rows)} rows but {len(completions)} completions")
    records, per_row, texts, flat_correct, flat_lengths = [], [], [], [], []
    for i, (row, sample) in enumerate(zip(rows, completions, strict=True)):
        samples = [sample] if isinstance(sample, str) or not isinstance(sample, Sequence) else list(sample)
        samples = [completion_text(s) for s in samples]
        reference = row.get("solution") or row.get("answer")
        if reference is None:
            raise ValueError(f"evaluate: row {i} (id={row.get('id')!r}) has neither 'solution' nor 'answer'")
        choices = row.get("choices") or parse_choices(str(row.get("question") or ""))
        verdicts = [answers_match(s, str(reference), choices, timeout=timeout) for s in samples]
        per_row.append(verdicts)
        texts.extend(samples)
        flat_correct.extend(verdicts)
        if lengths is not None:
            row_lengths = lengths[i]
            flat_lengths.extend([row_lengths] if isinstance(row_lengths, int) else list(row_lengths))
        records.append(
            {
                "index": i,
                "id": row.get("id"),
                "answer": row.get("answer"),
                "predictions": [extract_final_answer(s) for s in samples],
                "verdicts": verdicts,
                "correct": any(verdicts),
            }
        )
    metrics = generation_step_metrics(
        texts, flat_correct, flat_lengths if lengths is not None else None, max_length
    )
    metrics["mean_sample_accuracy"] = metrics.pop("accuracy")
    metrics["accuracy"] = pass_at_k(per_row)
    metrics["pass@1_unbiased"] = mean_pass_at_k(per_row, 1) if per_row and all(per_row) else 0.0
    metrics["num_items"] = float(len(rows))
    metrics["samples_per_item"] = float(len(texts) / len(rows)) if rows else 0.0
    return EvalResult(metrics=metrics, records=records)
