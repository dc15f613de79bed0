"""``VisionSFTTrainer``: TRL's ``SFTTrainer`` on the same rows, images and pixel budget as GRPO.

The output directory holds the model *and* the processor, so it is a valid ``--model`` for
``r1vision grpo`` (SFT → GRPO).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from trl import SFTTrainer

from r1vision.trainer.checkpoint import CheckpointRenameMixin
from r1vision.trainer.config import VisionSFTConfig
from r1vision.trainer.logline import use_compact_log
from r1vision.trainer.output import FinalOutputMixin
from r1vision.trainer.sample_log import ROW_INDEX, with_row_index
from r1vision.trainer.setup import VisionSetupMixin, drop_vision_input_grad_hooks
from r1vision.trainer.validation import DatasetValidationError, check_sequence_lengths, first_row, row_label
from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import fit_to_budget, images_of_row, load_image
from r1vision.vision.video import videos_of_row

logger = logging.getLogger(__name__)


class VideoSFTUnsupportedError(DatasetValidationError):
    """SFT was given video rows, which it does not train on yet."""


def _refuse_videos(*datasets: Any) -> None:
    """TRL 1.16's vision collator hands the processor images only: a video row would fail inside the first
    step with a token-count error. Refuse it before any weights load, naming the row."""
    for dataset in datasets:
        first = first_row(dataset)
        if first is not None and videos_of_row(first):
            raise VideoSFTUnsupportedError(
                f"{row_label(first, 0)}: sft does not train on video rows yet (GRPO does); start GRPO from the "
                "base model, or SFT on image rows"
            )


class BudgetedImageCollator:
    """Wraps TRL's vision collator: loads each row's images and resizes them to the budget first."""

    def __init__(self, inner: Any, budget: PixelBudget, image_root: str | None) -> None:
        self.inner = inner
        self.budget = budget
        self.image_root = image_root

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        prepared, indices = [], []
        for row in examples:
            raw = images_of_row(row)
            new = {k: v for k, v in row.items() if k not in ("image", "images", ROW_INDEX)}
            new["images"] = [fit_to_budget(load_image(v, self.image_root), self.budget) for v in raw]
            prepared.append(new)
            if row.get(ROW_INDEX) is not None:
                indices.append(int(row[ROW_INDEX]))
        batch = self.inner(prepared)
        if len(indices) == len(examples):  # travels with the batch; compute_loss takes it off
            batch[ROW_INDEX] = torch.tensor(indices)
        return batch


class VisionSFTTrainer(FinalOutputMixin, CheckpointRenameMixin, VisionSetupMixin, SFTTrainer):
    """SFT for Qwen-VL models with r1vision's image handling. Same arguments as ``trl.SFTTrainer``."""

    _r1vision_kind = "sft"

    def __init__(
        self,
        model: str | Any,
        args: VisionSFTConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        peft_config: Any = None,
        callbacks: list | None = None,
        **kwargs: Any,
    ) -> None:
        args = args or VisionSFTConfig(output_dir="outputs/sft")
        _refuse_videos(train_dataset, eval_dataset)
        train_dataset = with_row_index(train_dataset)
        processing_class, peft_config, callbacks = self._prepare_vision(
            model, args, processing_class, peft_config, callbacks, [train_dataset, eval_dataset]
        )
        for dataset in (train_dataset, eval_dataset):
            budgeted = self.pixel_budget is not None  # other families: the processor's own sizes
            if budgeted and dataset is not None and not isinstance(dataset, dict) and args.validate_rows != 0:
                check_sequence_lengths(
                    dataset,
                    processing_class,
                    self.pixel_budget,
                    args.max_length,
                    args.image_root,
                    args.validate_rows,
                )
        self._init_trl(
            args,
            model=model,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=callbacks,
            **kwargs,
        )
        use_compact_log(self)
        drop_vision_input_grad_hooks(self.model)
        if getattr(self, "_is_vision_dataset", False) and self.pixel_budget is not None:
            self.data_collator = BudgetedImageCollator(self.data_collator, self.pixel_budget, args.image_root)

    def _set_signature_columns_if_needed(self) -> None:
        """TRL keeps the columns its collator reads; the row index travels too (see compute_loss)."""
        super()._set_signature_columns_if_needed()
        vision = getattr(self, "_is_vision_dataset", False)  # text rows go through TRL's tokenizing map
        if vision and self._signature_columns is not None and ROW_INDEX not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, ROW_INDEX]

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """TRL's loss, after taking the rows' indices off the batch (recorded for the sample log in training)."""
        indices = inputs.pop(ROW_INDEX, None)
        if indices is not None and model.training and self._sample_log is not None:
            self._sample_log.record(indices)
        return super().compute_loss(model, inputs, *args, **kwargs)
