"""Checkpoints taken between the optimizer steps that one generation feeds (``steps_per_generation`` above
``gradient_accumulation_steps``; the geometry recipe trains 32 updates per rollout and saves every 100).

TRL keeps the generation in ``_buffered_inputs`` and counts micro-steps in ``_step``, and saves neither: a
resumed run generated at once and counted from 0 again, so it trained the interrupted generation's whole
batch anew (from new samples) and every later generation started that many micro-steps late against the
prompts the data loader hands out. :class:`GenerationBufferMixin` saves each process's share of the
generation in the checkpoint (``rollout_buffer_rank{N}.pt``) and restores it with the count: the resumed run
continues from those samples as the uninterrupted one does. On another process count the shares fit no
process, so every process samples that generation anew, with the count restored so the rest stays aligned.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from r1vision.checkpoints import save_generation, saved_generation

logger = logging.getLogger(__name__)


class GenerationBufferMixin:
    """For ``trl.GRPOTrainer`` subclasses: save and restore the generation a checkpoint interrupts."""

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        every = self.args.steps_per_generation * self.num_iterations  # type: ignore[attr-defined]
        if self._buffered_inputs is None or self._step % every == 0:  # type: ignore[attr-defined]
            return  # at a generation boundary: the next step generates anyway
        save_generation(
            {"step": self._step, "inputs": self._buffered_inputs},  # type: ignore[attr-defined]
            os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}"),  # type: ignore[attr-defined]
            self.accelerator.process_index,  # type: ignore[attr-defined]
        )

    def _load_rng_state(self, checkpoint: str | None) -> None:
        # Trainer calls this once on resume, on every process, after the state is restored and before the
        # first resumed training step prepares its inputs.
        super()._load_rng_state(checkpoint)  # type: ignore[misc]
        if not checkpoint:
            return
        acc = self.accelerator  # type: ignore[attr-defined]
        self._step = self.state.global_step * self.args.gradient_accumulation_steps  # type: ignore[attr-defined]
        self._buffered_inputs = None
        path, why = saved_generation(checkpoint, acc.process_index, acc.num_processes)
        if why:
            logger.warning(why)
        if path:
            device = "cpu" if acc.device.type == "cpu" else acc.device  # DDP on CPU names it cpu:0
            saved = torch.load(path, map_location=device, weights_only=False)
            self._step, self._buffered_inputs = int(saved["step"]), saved["inputs"]
