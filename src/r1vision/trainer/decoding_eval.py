"""Evaluation at several decodings during training (MAYE's scheme), logged next to the training metrics.

Every ``every_steps`` optimizer steps, each split is generated at each decoding (e.g. pass@8 at T=1.0,
pass@1 at T=0.6, pass@1 at T=0.01 / top_p 0.001), scored with the task's ``evaluate`` and logged as
``eval_<split>/<decoding>/<metric>`` through ``trainer.log`` — so the values land in ``metrics.csv`` and
every tracker, in the row of the step they were measured at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from r1vision.generation.hf import generate
from r1vision.generation.sampling import SamplingOptions
from r1vision.tasks.base import RunContext


class DecodingEvalCallback(TrainerCallback):
    """Generate and score ``splits`` at ``decodings`` every ``every_steps`` steps (and at the end).

    ``decodings`` maps a name to ``{"k": samples, "temperature": T, "top_p": p}`` (MAYE's three are
    ``r1vision.tasks.geometry.metrics.DECODINGS``); scores come from ``task.evaluate(rows, samples, opts,
    run)``, the task's own evaluation.
    """

    def __init__(
        self,
        trainer: Any,
        task: Any,
        splits: Mapping[str, Sequence[dict[str, Any]]],
        every_steps: int,
        decodings: Mapping[str, Mapping[str, Any]],
        opts: Any = None,
        run: RunContext | None = None,
        max_new_tokens: int = 256,
        batch_size: int = 8,
        seed: int = 0,
    ) -> None:
        if every_steps <= 0:
            raise ValueError(f"every_steps must be positive, got {every_steps}")
        self.trainer, self.task, self.splits = trainer, task, dict(splits)
        self.opts = opts if opts is not None else task.parse_options()
        self.run = run or RunContext()
        self.every_steps, self.decodings = every_steps, dict(decodings)
        self.max_new_tokens, self.batch_size, self.seed = max_new_tokens, batch_size, seed

    def evaluate_now(self, step: int) -> dict[str, float]:
        """Run every split at every decoding; return the flat metrics (also logged by the callback).

        With several processes the rows are dealt round-robin across them and the completions gathered
        back in row order (each process would otherwise generate every row); under ZeRO-3 the model is
        generated from with its parameters gathered once (TRL's ``unwrap_model_for_generation``), so no
        per-forward collective can fall out of step when processes sample different lengths.
        """
        from trl.models.utils import unwrap_model_for_generation

        trainer = self.trainer
        accelerator = trainer.accelerator
        rank, world = accelerator.process_index, accelerator.num_processes
        logs: dict[str, float] = {}
        with unwrap_model_for_generation(
            trainer.model_wrapped, accelerator, gather_deepspeed3_params=True
        ) as model:
            was_training = model.training
            model.eval()
            try:
                for split, rows in self.splits.items():
                    for name, decoding in self.decodings.items():
                        options = SamplingOptions(
                            max_new_tokens=self.max_new_tokens,
                            temperature=float(decoding["temperature"]),
                            top_p=float(decoding.get("top_p", 1.0)),
                            num_samples=int(decoding.get("k", 1)),
                            seed=self.seed + step,
                        )
                        mine = list(range(rank, len(rows), world))
                        local: list[list[str]] = []
                        for start in range(0, len(mine), self.batch_size):
                            batch = [rows[i] for i in mine[start : start + self.batch_size]]
                            local += generate(
                                model,
                                trainer.processing_class,
                                batch,
                                trainer.pixel_budget,
                                options,
                                trainer.args.image_root,
                            )
                        completions = _in_row_order(list(zip(mine, local, strict=True)), world, len(rows))
                        samples = [c if len(c) > 1 else c[0] for c in completions]
                        result = self.task.evaluate(list(rows), samples, self.opts, self.run)
                        for key, value in result.metrics.items():
                            if isinstance(value, (int, float)):
                                logs[f"eval_{split}/{name}/{key}"] = float(value)
            finally:
                model.train(was_training)
                torch.manual_seed(self.seed + step + 1)  # leave the training RNG stream independent of eval
        return logs

    def on_step_end(self, args, state, control, **kwargs):
        last = state.global_step >= state.max_steps > 0
        if state.global_step % self.every_steps == 0 or last:
            # Trainer.log resets control.should_log; the step's own log (loss, learning rate, grad norm)
            # comes after this callback and must still happen. Both land in the step's metrics.csv row.
            should_log = control.should_log
            self.trainer.log(self.evaluate_now(state.global_step))
            control.should_log = should_log


def _in_row_order(pairs: list[tuple[int, list[str]]], world: int, n: int) -> list[list[str]]:
    """Every process's ``(row index, completions)`` gathered and put back in row order."""
    if world > 1:
        from accelerate.utils import gather_object

        pairs = gather_object(pairs)
    by_row = dict(pairs)
    return [by_row[i] for i in range(n)]
