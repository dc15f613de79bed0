"""Qwen-VL processors that work without torchvision.

transformers' stock ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor`` require a video
processor, and the video processor requires torchvision, which has no CPU build matching torch 2.13.
These subclasses drop the video processor from the constructor (so ``from_pretrained`` does not try to
load one), carry r1vision's torch-only :class:`~r1vision.vision.video.QwenVideoProcessor` instead, and
are registered with ``AutoProcessor`` for the Qwen-VL model types when r1vision is imported, so
``AutoProcessor.from_pretrained`` works for real Hub checkpoints and for our tiny models alike.

The saved ``processor_config.json`` keeps the stock class name, so folders we write stay standard.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    AutoProcessor,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen2VLConfig,
    Qwen2VLProcessor,
    Qwen3_5Config,
    Qwen3_5MoeConfig,
    Qwen3VLConfig,
    Qwen3VLMoeConfig,
    Qwen3VLProcessor,
)

from r1vision.vision import mrope


class _ImageOnlyMixin:
    """Shared behaviour: no video processor, and save under the stock class name."""

    _stock_name: str = ""
    _video_type: str = ""

    def _attach_video_processor(self) -> None:
        """Videos through :class:`~r1vision.vision.video.QwenVideoProcessor` (torch alone); not a
        constructor argument, so saved folders stay the stock layout."""
        from r1vision.vision.video_processor import QwenVideoProcessor

        image_processor = getattr(self, "image_processor", None)
        if image_processor is not None and hasattr(image_processor, "temporal_patch_size"):
            self.video_processor = QwenVideoProcessor.from_image_processor(image_processor)

    def to_dict(self) -> dict[str, Any]:  # type: ignore[override]
        out = super().to_dict()  # type: ignore[misc]
        out.pop("video_processor", None)
        out["processor_class"] = self._stock_name
        return out

    def save_pretrained(self, save_directory: Any, *args: Any, **kwargs: Any) -> Any:
        """Save as the stock processor does; ``tokenizer_config.json`` names the stock class too."""
        tokenizer = self.tokenizer  # type: ignore[attr-defined]
        stock = self._stock_name
        # ProcessorMixin stamps the tokenizer with type(self).__name__ before saving it; stamp the stock name.
        tokenizer._set_processor_class = lambda _name: type(tokenizer)._set_processor_class(tokenizer, stock)
        try:
            out = super().save_pretrained(save_directory, *args, **kwargs)  # type: ignore[misc]
        finally:
            del tokenizer._set_processor_class
        write_video_config(self.image_processor, save_directory, stock, self._video_type)  # type: ignore[attr-defined]
        return out


# What a video-processor config shares with the image processor's (the Hub's Qwen3-VL layout).
_VIDEO_KEYS = (
    "size",
    "patch_size",
    "temporal_patch_size",
    "merge_size",
    "image_mean",
    "image_std",
    "do_resize",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "do_convert_rgb",
    "resample",
)
VIDEO_CONFIG = "video_preprocessor_config.json"


def write_video_config(image_processor: Any, folder: Any, processor_class: str, video_type: str) -> None:
    """Write ``video_preprocessor_config.json`` next to a saved processor, as the Hub's Qwen-VL checkpoints
    carry one (Qwen3-VL) or fall back to their image config for it (Qwen2/2.5-VL). A torchvision install
    loads the stock processor, which builds a video processor and raises ``OSError`` without such a config
    (the folders r1vision wrote before had none)."""
    import json
    from pathlib import Path

    values = image_processor.to_dict()
    config = {k: values[k] for k in _VIDEO_KEYS if k in values}
    config |= {"processor_class": processor_class, "video_processor_type": video_type}
    (Path(folder) / VIDEO_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


class ImageOnlyQwen2VLProcessor(_ImageOnlyMixin, Qwen2VLProcessor):
    """Qwen2-VL processor for images only (no torchvision needed)."""

    _stock_name = "Qwen2VLProcessor"
    _video_type = "Qwen2VLVideoProcessor"

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        kwargs.pop("video_processor", None)
        super().__init__(
            image_processor, tokenizer, video_processor=None, chat_template=chat_template, **kwargs
        )
        self._attach_video_processor()


class ImageOnlyQwen2_5_VLProcessor(_ImageOnlyMixin, Qwen2_5_VLProcessor):
    """Qwen2.5-VL processor for images only (no torchvision needed)."""

    _stock_name = "Qwen2_5_VLProcessor"
    _video_type = "Qwen2VLVideoProcessor"  # Qwen2.5-VL's processor uses Qwen2-VL's video processor

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        kwargs.pop("video_processor", None)
        super().__init__(
            image_processor, tokenizer, video_processor=None, chat_template=chat_template, **kwargs
        )
        self._attach_video_processor()


class ImageOnlyQwen3VLProcessor(_ImageOnlyMixin, Qwen3VLProcessor):
    """Qwen3-VL processor for images only (no torchvision needed)."""

    _stock_name = "Qwen3VLProcessor"
    _video_type = "Qwen3VLVideoProcessor"

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        kwargs.pop("video_processor", None)
        super().__init__(
            image_processor, tokenizer, video_processor=None, chat_template=chat_template, **kwargs
        )
        self._attach_video_processor()


# Qwen3-VL-MoE and Qwen3.5 (dense, MoE) ship Qwen3-VL's processor (transformers' processing_auto agrees).
PROCESSOR_CLASSES = {
    "qwen2_vl": ImageOnlyQwen2VLProcessor,
    "qwen2_5_vl": ImageOnlyQwen2_5_VLProcessor,
    "qwen3_vl": ImageOnlyQwen3VLProcessor,
    "qwen3_vl_moe": ImageOnlyQwen3VLProcessor,
    "qwen3_5": ImageOnlyQwen3VLProcessor,
    "qwen3_5_moe": ImageOnlyQwen3VLProcessor,
}


_STOCK_TO_IMAGE_ONLY = {cls._stock_name: cls for cls in PROCESSOR_CLASSES.values()}


def register_processors() -> None:
    """Route ``AutoProcessor`` for Qwen-VL models to the image-only processors (idempotent).

    Registration by config type covers folders without a ``processor_class`` entry. Hub checkpoints name
    the stock class in ``preprocessor_config.json``, which ``AutoProcessor`` resolves by name before it
    looks at the config type; when torchvision is missing (the stock class cannot load) we also redirect
    those names. With a working torchvision the stock classes are left alone.
    """
    from transformers.models.auto import processing_auto
    from transformers.utils import is_torchvision_available

    for config_cls, proc_cls in (
        (Qwen2VLConfig, ImageOnlyQwen2VLProcessor),
        (Qwen2_5_VLConfig, ImageOnlyQwen2_5_VLProcessor),
        (Qwen3VLConfig, ImageOnlyQwen3VLProcessor),
        (Qwen3VLMoeConfig, ImageOnlyQwen3VLProcessor),
        (Qwen3_5Config, ImageOnlyQwen3VLProcessor),
        (Qwen3_5MoeConfig, ImageOnlyQwen3VLProcessor),
    ):
        AutoProcessor.register(config_cls, proc_cls, exist_ok=True)

    if is_torchvision_available() or getattr(processing_auto.processor_class_from_name, "_r1vision", False):
        return
    original = processing_auto.processor_class_from_name

    def processor_class_from_name(class_name: str):
        return _STOCK_TO_IMAGE_ONLY.get(class_name) or original(class_name)

    processor_class_from_name._r1vision = True  # type: ignore[attr-defined]
    processing_auto.processor_class_from_name = processor_class_from_name


# Importing this module registers the processors (r1vision.vision.registration imports it when transformers
# loads; `import r1vision.vision.processor` first works the same way). Idempotent.
register_processors()
# Qwen2/2.5-VL text positions after a video as Qwen's reference code (and vLLM) place them.
mrope.apply()
