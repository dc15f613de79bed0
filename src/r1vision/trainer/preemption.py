"""Preemption: a signal asks a run to stop at the next step boundary with a complete checkpoint.

Slurm sends a job's tasks a signal before it kills them (``--signal=USR1@300``: five minutes ahead; a
preemption sends SIGTERM with ``GraceTime``). On one of the signals in ``R1VISION_PREEMPT_SIGNALS``
(default ``USR1,TERM``) :class:`PreemptionCallback` lets the current optimizer step finish, then every
process agrees (one all-reduce of a flag per step, so a signal that reached only some ranks stops them
all at the same step), saves ``checkpoint-N`` and leaves the training loop. The runner then skips the
final folder and exits with :data:`EXIT_PREEMPTED` after writing ``preempted.json`` in ``output_dir``, which
the shipped sbatch scripts read to ``scontrol requeue`` the job; the requeued job resumes with
``--resume_from_checkpoint auto`` (the newest complete checkpoint, or a fresh start when there is none).

After the last step the run's wrap-up (final evaluation, the final folder, its upload) runs under
:func:`signals_held`: a signal then waits for the wrap-up to finish (the command exits 0: nothing is left to
do), where it used to kill the process in the middle of writing the final folder (found by
``benchmarks/bench_faults.py``). ``infer`` checks the same holder between batches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

PREEMPTED_FILE = "preempted.json"
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: try again later
DEFAULT_SIGNALS = "USR1,TERM"


class Preempted(Exception):
    """The run stopped at a step boundary on a signal; its checkpoint is saved."""


def signals_from_env() -> list[signal.Signals]:
    """The signals that preempt a run: ``R1VISION_PREEMPT_SIGNALS`` (names, comma-separated; empty: none)."""
    names = os.environ.get("R1VISION_PREEMPT_SIGNALS", DEFAULT_SIGNALS)
    out = []
    for name in (n.strip().upper() for n in names.split(",") if n.strip()):
        try:
            out.append(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
        except KeyError:
            raise ValueError(f"R1VISION_PREEMPT_SIGNALS: unknown signal {name!r}") from None
    return out


class SignalHolder:
    """The preemption signals caught by :func:`signals_held`: ``received`` names the first one."""

    def __init__(self) -> None:
        self.received: str | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
            logger.warning("caught %s: finishing the work in hand first", self.received)


@contextlib.contextmanager
def signals_held(signals: list[signal.Signals] | None = None) -> Iterator[SignalHolder]:
    """Catch the preemption signals (``R1VISION_PREEMPT_SIGNALS``) in the ``with`` block instead of dying
    mid-write; the previous handlers are back afterwards. Outside the main thread nothing is caught."""
    holder = SignalHolder()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signals_from_env() if signals is None else signals:
            previous[sig] = signal.signal(sig, holder._handle)
    try:
        yield holder
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class PreemptionCallback(TrainerCallback):
    """Stops training at the next step boundary with a checkpoint when a preemption signal arrived."""

    def __init__(self, signals: list[signal.Signals] | None = None) -> None:
        self.signals = signals_from_env() if signals is None else signals
        self.received: str | None = None
        self.stopped_at: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name
        logger.warning("%s received: stopping after this step with a checkpoint", self.received)

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def on_train_end(self, args, state, control, **kwargs):  # noqa: D102
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102 - after each optimizer step
        if self._agreed(args) and self.stopped_at is None:
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control

    def _agreed(self, args: Any) -> bool:
        """Whether any process received a signal (a collective: every process calls it every step)."""
        import torch
        import torch.distributed as dist

        flag = self.received is not None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            device = args.device if dist.get_backend() == "nccl" else "cpu"
            value = torch.tensor([1.0 if flag else 0.0], device=device)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
            flag = bool(value.item())
        return flag


def preemption_of(trainer: Any) -> PreemptionCallback | None:
    """The trainer's preemption callback, if it stopped the run."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, PreemptionCallback) and callback.stopped_at is not None:
            return callback
    return None


def finish_if_preempted(trainer: Any) -> None:
    """After ``trainer.train()``: when a signal stopped it, write ``preempted.json`` and raise
    :class:`Preempted` (the final folder, evaluation and upload belong to the run that finishes)."""
    callback = preemption_of(trainer)
    if callback is None:
        return
    out = Path(trainer.args.output_dir)
    if trainer.is_world_process_zero():
        record = {"step": callback.stopped_at, "signal": callback.received, "time": time.time(),
                  "checkpoint": f"checkpoint-{callback.stopped_at}"}  # fmt: skip
        tmp = out / (PREEMPTED_FILE + ".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, out / PREEMPTED_FILE)
    raise Preempted(
        f"stopped at step {callback.stopped_at} on {callback.received or 'a signal on another process'}: "
        f"{out / f'checkpoint-{callback.stopped_at}'} saved; resume with --resume_from_checkpoint auto"
    )


def clear_marker(output_dir: str | os.PathLike) -> None:
    """A resumed run removes the marker of the preemption it continues from."""
    (Path(output_dir) / PREEMPTED_FILE).unlink(missing_ok=True)
