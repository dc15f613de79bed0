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
from r1vision.trainer.validation import check_sequence_lengths, first_row, row_label
from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import fit_to_budget, images_of_row, load_image
from r1vision.vision.video import VideoBudget, fill_video_parts, load_clip, videos_of_row

logger = logging.getLogger(__name__)


def _with_empty_images(dataset: Any) -> Any:
    """Video rows get an empty ``images`` column: TRL routes a dataset to its vision collator (not its text
    tokenizer, which would render one placeholder token per video) only when it sees an image column."""
    first = first_row(dataset)
    if first is None or not videos_of_row(first) or "images" in first or "image" in first:
        return dataset
    return dataset.map(lambda _: {"images": []}, desc="video rows: empty images column")


class _ProcessorWithVideos:
    """The processor, with this batch's clips handed to every call whose text holds video placeholders:
    TRL's collator calls ``processor(images=..., text=...)`` and knows no videos."""

    def __init__(self, processor: Any, clips: list[Any]) -> None:
        self._processor = processor
        self._clips = clips

    def __getattr__(self, name: str) -> Any:
        return getattr(self._processor, name)

    def __call__(self, *args: Any, text: Any = None, **kwargs: Any) -> Any:
        token = getattr(self._processor, "video_token", "<|video_pad|>")
        texts = [text] if isinstance(text, str) else list(text or [])
        if self._clips and any(token in t for t in texts):
            kwargs["videos"] = self._clips
        return self._processor(*args, text=text, **kwargs)


class BudgetedImageCollator:
    """Wraps TRL's vision collator: loads each row's images and resizes them to the budget first."""

    def __init__(
        self, inner: Any, budget: PixelBudget, image_root: str | None, video_budget: VideoBudget | None = None
    ) -> None:
        self.inner = inner
        self.budget = budget
        self.image_root = image_root
        self.video_budget = video_budget

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        prepared, indices, clips = [], [], []
        for row in examples:
            raw = images_of_row(row)
            new = {k: v for k, v in row.items() if k not in ("image", "images", "video", "videos", ROW_INDEX)}
            new["images"] = [fit_to_budget(load_image(v, self.image_root), self.budget) for v in raw]
            videos = videos_of_row(row)
            if videos and self.video_budget is not None:  # into the prompt's video parts, in order
                row_clips = [load_clip(v, self.video_budget, self.image_root) for v in videos]
                new["prompt"] = fill_video_parts(row["prompt"], row_clips, row_label(row, row.get(ROW_INDEX)))
                clips.extend(row_clips)
            prepared.append(new)
            if row.get(ROW_INDEX) is not None:
                indices.append(int(row[ROW_INDEX]))
        processor = self.inner.processor
        self.inner.processor = _ProcessorWithVideos(processor, clips)
        try:
            batch = self.inner(prepared)
        finally:
            self.inner.processor = processor
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
        train_dataset = with_row_index(_with_empty_images(train_dataset))
        eval_dataset = _with_empty_images(eval_dataset)
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
                    self.video_budget,
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
            self.data_collator = BudgetedImageCollator(
                self.data_collator, self.pixel_budget, args.image_root, self.video_budget
            )

    def _set_signature_columns_if_needed(self) -> None:
        """TRL keeps the columns its collator reads; the row index travels too (see compute_loss)."""
        super()._set_signature_columns_if_needed()
        vision = getattr(self, "_is_vision_dataset", False)  # text rows go through TRL's tokenizing map
        if vision and self._signature_columns is not None and ROW_INDEX not in self._signature_columns:
            self._signature_columns = [
                *self._signature_columns,
                ROW_INDEX,
                "video",
                "videos",
                "id",
                "problem_id",
            ]

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """TRL's loss, after taking the rows' indices off the batch (recorded for the sample log in training)."""
        indices = inputs.pop(ROW_INDEX, None)
        if indices is not None and model.training and self._sample_log is not None:
            self._sample_log.record(indices)
        return super().compute_loss(model, inputs, *args, **kwargs)
