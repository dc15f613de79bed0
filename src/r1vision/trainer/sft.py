"""``VisionSFTTrainer``: TRL's ``SFTTrainer`` on the same rows, images and pixel budget as GRPO.

The output directory holds the model *and* the processor, so it is a valid ``--model`` for
``r1vision grpo`` (SFT → GRPO).
"""

from __future__ import annotations

import logging
from typing import Any

from trl import SFTTrainer

from r1vision.trainer.checkpoint import CheckpointRenameMixin
from r1vision.trainer.config import VisionSFTConfig
from r1vision.trainer.logline import use_compact_log
from r1vision.trainer.output import FinalOutputMixin
from r1vision.trainer.setup import VisionSetupMixin, drop_vision_input_grad_hooks
from r1vision.trainer.validation import check_sequence_lengths
from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import fit_to_budget, images_of_row, load_image

logger = logging.getLogger(__name__)


class BudgetedImageCollator:
    """Wraps TRL's vision collator: loads each row's images and resizes them to the budget first."""

    def __init__(self, inner: Any, budget: PixelBudget, image_root: str | None) -> None:
        self.inner = inner
        self.budget = budget
        self.image_root = image_root

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        prepared = []
        for row in examples:
            raw = images_of_row(row)
            new = {k: v for k, v in row.items() if k not in ("image", "images")}
            new["images"] = [fit_to_budget(load_image(v, self.image_root), self.budget) for v in raw]
            prepared.append(new)
        return self.inner(prepared)


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
