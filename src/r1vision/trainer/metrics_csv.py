"""``metrics.csv``: one row per logged step, next to TRL's own logging, safe across resumes."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


class MetricsCSVCallback(TrainerCallback):
    """Append every ``on_log`` event as a CSV row keyed by ``step``.

    Columns are the union of all keys seen so far; a new key rewrites the (small) file with the wider
    header. Several events at one step (train metrics, eval metrics, the end-of-training summary) are
    merged into that step's row. On resume, rows after the checkpoint's step are dropped first, so a killed-and-resumed run has
    exactly one row per step, like an uninterrupted one.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []

    def _load(self) -> None:
        if self.path.exists():
            with self.path.open(newline="") as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or [])
                self.rows = list(reader)

    def _rewrite(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(self.path)  # atomic: a kill mid-write never leaves a truncated file

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self._load()
        # Keep only rows up to the step we (re)start from; a fresh run (step 0) starts an empty file.
        kept = [r for r in self.rows if _as_int(r.get("step")) <= state.global_step and state.global_step > 0]
        if len(kept) != len(self.rows) or not self.path.exists():
            self.rows = kept
            if not self.columns:
                self.columns = ["step", "epoch"]
            self._rewrite()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        row: dict[str, Any] = {"step": state.global_step, "epoch": state.epoch}
        for key, value in logs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = value if math.isfinite(float(value)) else float("nan")
        new_cols = [k for k in row if k not in self.columns]
        merge = bool(self.rows) and _as_int(self.rows[-1].get("step")) == state.global_step
        if merge:  # several log events at one step (train, eval, summary) share its row
            self.rows[-1] = {**self.rows[-1], **row}
        else:
            self.rows.append(row)
        if merge or new_cols or not self.path.exists():
            self.columns = (self.columns or []) + new_cols
            self._rewrite()
        else:
            with self.path.open("a", newline="") as f:
                csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore").writerow(row)


def _as_int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0
