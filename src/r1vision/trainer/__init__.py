"""Trainers and configs: ``VisionGRPOTrainer``, ``VisionSFTTrainer`` and their configs."""

from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig
from r1vision.trainer.grpo import ImagePlaceholderMismatchError, VisionGRPOTrainer
from r1vision.trainer.sft import VisionSFTTrainer
from r1vision.trainer.validation import DatasetValidationError

__all__ = [
    "DatasetValidationError",
    "ImagePlaceholderMismatchError",
    "VisionGRPOConfig",
    "VisionGRPOTrainer",
    "VisionSFTConfig",
    "VisionSFTTrainer",
]
