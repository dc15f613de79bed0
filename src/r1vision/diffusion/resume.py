"""Checkpoints of :class:`~r1vision.diffusion.trainer.DiffusionGRPOTrainer` beyond ``Trainer``'s own files: the
EMA weights (``ema.pt``) and, for a checkpoint taken between the updates of one generation, each process's
share of that generation (``rollout_buffer_rank{N}.pt``), and restoring both on resume.

A mixin placed after :class:`~r1vision.trainer.checkpoint.CheckpointRenameMixin` in the trainer's bases, so its
files are written inside that mixin's disk-error naming and the layout file is written beside them. It reads
the trainer's ``ema``, ``_generation``, ``_micro``, ``steps_per_generation`` and ``family``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from r1vision.checkpoints import save_generation, saved_generation
from r1vision.diffusion.rollout import Generation

logger = logging.getLogger(__name__)
EMA_FILE = "ema.pt"


class ResumeMixin:
    """Save and restore the EMA and an interrupted generation (see the module docstring)."""

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"  # type: ignore[attr-defined]
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        if self.ema is not None and self.args.should_save:  # type: ignore[attr-defined]
            torch.save(self.ema.state_dict(), folder / EMA_FILE)  # type: ignore[attr-defined]
        gen = self._generation  # type: ignore[attr-defined]
        if gen is not None and self._micro % self.steps_per_generation:  # type: ignore[attr-defined]
            save_generation(gen.state_dict(), str(folder), self.accelerator.process_index)  # type: ignore[attr-defined]

    def _on_train_begin(self) -> None:
        """After transformers restored the weights, optimizer and step: the EMA, the micro-step count and a
        generation saved between its updates."""
        self._micro = self.state.global_step * self.args.gradient_accumulation_steps  # type: ignore[attr-defined]
        checkpoint = getattr(self, "resumed_from", None)  # set by CheckpointRenameMixin.train
        if not checkpoint:
            return
        folder = Path(checkpoint)
        if self.ema is not None and (folder / EMA_FILE).is_file():  # type: ignore[attr-defined]
            self.ema.load_state_dict(torch.load(folder / EMA_FILE, map_location="cpu", weights_only=True))  # type: ignore[attr-defined]
        # On another process count every process samples that generation anew (the noise comes from the
        # per-process streams, which a new count redraws anyway).
        acc = self.accelerator  # type: ignore[attr-defined]
        path, why = saved_generation(checkpoint, acc.process_index, acc.num_processes)
        if why:
            logger.warning(why)
        if path:
            state = torch.load(path, map_location="cpu", weights_only=False)
            self._generation = Generation.from_state(state, self.family.device)  # type: ignore[attr-defined]
