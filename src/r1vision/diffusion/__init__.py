"""Text-to-image GRPO (Flow-GRPO / VRL) for flow-matching diffusion models: ``DiffusionGRPOTrainer`` and its
config, the SDE policy step, model families (SD3/SD3.5), rewards (OCR, image statistics, local scorers),
EMA, LoRA export and prompt data. Needs the ``diffusion`` extra (diffusers); the OCR reward the ``ocr`` extra.
"""

from __future__ import annotations

from r1vision.diffusion.config import DiffusionGRPOConfig

__all__ = ["DiffusionGRPOConfig", "DiffusionGRPOTrainer"]


def __getattr__(name: str):
    if name == "DiffusionGRPOTrainer":  # imports diffusers and the Trainer stack only when asked for
        from r1vision.diffusion.trainer import DiffusionGRPOTrainer

        return DiffusionGRPOTrainer
    raise AttributeError(name)
