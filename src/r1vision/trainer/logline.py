"""One compact log line per logging step, in place of transformers' printed dict of strings.

``step 12/100 | reward 0.531 ± 0.210 (accuracy 0.400, format 0.900) | len 123 | kl 0.0021 | lr 1.0e-05 |
1.52 s/step``, numbers formatted as numbers; an evaluation is ``eval at step 4 | reward 0.507 | ...`` and
the end of training ``trained 100 steps in 152 s (0.66 steps/s), mean loss 0.012``. When
every prompt group of a step had the same reward for all its completions (``frac_reward_zero_std`` = 1),
no completion carried a learning signal: a warning says so and what usually helps.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from transformers.trainer_callback import PrinterCallback, ProgressCallback

logger = logging.getLogger(__name__)


def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3f}"


def format_eval(logs: dict[str, Any], step: int) -> str | None:
    """The compact line for an evaluation log (``eval_*`` keys), ``None`` for any other log."""
    values = {k[len("eval_") :]: v for k, v in logs.items() if k.startswith("eval_")}
    if not values:
        return None
    parts = [f"eval at step {step}"]
    for key, value in values.items():
        number = _num(value)
        if number is None or key in ("runtime", "samples_per_second", "steps_per_second"):
            continue
        parts.append(f"{key} {int(number)}" if key.startswith("num_") else f"{key} {_fmt(number)}")
    return " | ".join(parts)


def format_summary(logs: dict[str, Any]) -> str | None:
    """The end-of-training line (the log with ``train_runtime``), ``None`` for any other log."""
    runtime = _num(logs.get("train_runtime"))
    if runtime is None:
        return None
    steps, loss = _num(logs.get("train_steps_per_second")), _num(logs.get("train_loss"))
    done = f"trained in {runtime:.1f} s"
    if steps:
        done = f"trained {round(steps * runtime)} steps in {runtime:.1f} s ({steps:.3g} steps/s)"
    return done + (f", mean loss {_fmt(loss)}" if loss is not None else "")


def format_logs(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """The compact line for a training log; an evaluation or the end-of-training summary gets its own
    (:func:`format_eval`, :func:`format_summary`); ``None`` for anything else."""
    if "reward" not in logs and "loss" not in logs:
        return format_eval(logs, step) or format_summary(logs)
    parts = [f"step {step}/{max_steps}" if max_steps > 0 else f"step {step}"]
    reward, std = _num(logs.get("reward")), _num(logs.get("reward_std"))
    if reward is not None:
        each = [
            f"{key[len('rewards/') : -len('/mean')]} {_fmt(v)}"
            for key, value in logs.items()
            if key.startswith("rewards/") and key.endswith("/mean") and (v := _num(value)) is not None
        ]
        text = f"reward {_fmt(reward)}" + (f" ± {_fmt(std)}" if std is not None else "")
        parts.append(text + (f" ({', '.join(each)})" if len(each) > 1 else ""))
    for key, label in (
        ("completions/mean_length", "len"),
        ("loss", "loss"),
        ("kl", "kl"),
        ("entropy", "entropy"),
        ("grad_norm", "grad"),
        ("learning_rate", "lr"),
    ):
        value = _num(logs.get(key))
        if value is not None:
            parts.append(f"{label} {value:.0f}" if label == "len" else f"{label} {_fmt(value)}")
    step_time = _num(logs.get("step_time"))
    if step_time is not None:
        parts.append(f"{step_time:.2f} s/step")
    return " | ".join(parts)


def zero_signal_warning(logs: dict[str, Any], step: int) -> str | None:
    """The warning for a step in which no prompt group's rewards differed (no GRPO learning signal)."""
    frac = _num(logs.get("frac_reward_zero_std"))
    if frac is None or frac < 1.0:
        return None
    return (
        f"step {step}: every prompt group's completions got the same reward (reward std 0 in all groups), so "
        "this step had no learning signal; if it persists, check the rewards on real outputs (r1vision score), "
        "raise temperature or num_generations, or start from an SFT checkpoint"
    )


class _Warner:
    """Says the zero-signal warning the first time and then every 25th time, with a count."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, logs: dict[str, Any], step: int) -> None:
        warning = zero_signal_warning(logs, step)
        if warning is None:
            return
        self.seen += 1
        if self.seen == 1 or self.seen % 25 == 0:
            logger.warning("%s (%d logged step(s) so far)", warning, self.seen)


class _CompactLog:
    """The shared ``on_log``: the compact line for training logs, transformers' own form for the rest."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._warn = _Warner()

    def _write(self, line: str) -> None:
        print(line)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        if not state.is_world_process_zero or logs is None:
            return
        line = format_logs(logs, state.global_step, state.max_steps)
        self._warn(logs, state.global_step)
        if line is None:
            return super().on_log(args, state, control, logs=logs, **kwargs)
        self._write(line)


class CompactProgressCallback(_CompactLog, ProgressCallback):
    """transformers' progress bar, writing :func:`format_logs` lines instead of the dict."""

    def _write(self, line: str) -> None:
        if self.training_bar is not None:
            self.training_bar.write(line)
        else:
            print(line)


class CompactPrinterCallback(_CompactLog, PrinterCallback):
    """transformers' printer (used with ``disable_tqdm``), printing :func:`format_logs` lines."""


def use_compact_log(trainer: Any) -> None:
    """Swap the trainer's progress/printer callback for the compact one (same bar, other log text)."""
    handler = trainer.callback_handler
    for old, new in ((ProgressCallback, CompactProgressCallback), (PrinterCallback, CompactPrinterCallback)):
        for callback in list(handler.callbacks):
            if type(callback) is old:
                handler.remove_callback(callback)
                handler.add_callback(new)
