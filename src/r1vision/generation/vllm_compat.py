"""Shims that let vLLM's Qwen-VL models run where torchvision is missing (vLLM's CPU build).

vLLM's Qwen-VL code (0.30) breaks without torchvision in three places:

1. it imports ``transformers.models.qwen2_vl.image_processing_qwen2_vl`` (for ``smart_resize`` and the
   image processor class), a module that imports torchvision at the top;
2. it loads the stock ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor``, whose
   ``from_pretrained`` insists on a torchvision video processor;
3. it reads sizes from ``processor.video_processor`` and calls it on every video.

:func:`apply` fixes each in place: (1) an alias module that serves the PIL image processor under the
torchvision module's name, (2) the model's processing-info asks for r1vision's torchvision-free
processors (subclasses of the stock ones, so vLLM's type checks pass), (3) with r1vision's torch-only
video processor (:class:`~r1vision.vision.video_processor.QwenVideoProcessor`), which takes the frames
r1vision already sampled and resized. Nothing changes when torchvision is importable.

vLLM runs parts of its start-up in other processes (a subprocess that inspects the model class, the
engine-core process, workers), so the shims must be applied there too. vLLM loads every entry point of
the ``vllm.general_plugins`` group in each of its processes; r1vision registers :func:`register` there
(``pyproject.toml``). :func:`apply` is also called directly before r1vision creates an engine.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import types
from typing import Any

from r1vision.import_hooks import patch_on_import

logger = logging.getLogger(__name__)

_APPLIED = False
# vLLM model module -> (processing-info class, image-only processor key in PROCESSOR_CLASSES)
_VLLM_QWEN_INFOS = {
    "vllm.model_executor.models.qwen2_vl": ("Qwen2VLProcessingInfo", "qwen2_vl"),
    "vllm.model_executor.models.qwen2_5_vl": ("Qwen2_5_VLProcessingInfo", "qwen2_5_vl"),
    "vllm.model_executor.models.qwen3_vl": ("Qwen3VLProcessingInfo", "qwen3_vl"),
}


def torchvision_available() -> bool:
    """Whether torchvision can be imported (a broken CUDA build counts as missing)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:  # probed only where it is installed (GPU machines); never on the CPU stack, which lacks it
        importlib.import_module("torchvision")
    except Exception:  # a build that does not match torch fails at import with various errors
        return False
    return True


def _alias_torchvision_image_module() -> None:
    """Serve the PIL Qwen2-VL image processor under the name of the torchvision one."""
    name = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
    if name in sys.modules and getattr(sys.modules[name], "_r1vision_alias", False):
        return
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil

    alias = types.ModuleType(name, "r1vision alias of image_processing_pil_qwen2_vl (no torchvision)")
    alias.__dict__.update({k: v for k, v in vars(pil).items() if not k.startswith("__")})
    alias.Qwen2VLImageProcessor = pil.Qwen2VLImageProcessorPil  # type: ignore[attr-defined]
    alias._r1vision_alias = True  # type: ignore[attr-defined]
    sys.modules[name] = alias
    package = sys.modules.get("transformers.models.qwen2_vl")
    if package is not None:
        # The lazy package resolves Qwen2VLImageProcessor from this submodule; bind it eagerly.
        package.image_processing_qwen2_vl = alias  # type: ignore[attr-defined]


def with_video_processor(processor: Any) -> Any:
    """Give a Qwen-VL processor r1vision's torch-only video processor when it has none (vLLM reads its
    sizes for dummy inputs and calls it on every video)."""
    from r1vision.vision.video_processor import QwenVideoProcessor

    if getattr(processor, "video_processor", None) is None:
        processor.video_processor = QwenVideoProcessor.from_image_processor(processor.image_processor)
    return processor


@functools.cache
def vllm_processor_class(family: str) -> type:
    """The image-only processor of ``family`` as vLLM calls it.

    vLLM (0.30) processes each video on its own, then calls the processor on text that still holds the
    bare ``<|video_pad|>`` placeholders, with no videos, and splices its own expansion in. transformers
    5.x refuses a video placeholder without a video in ``validate_inputs``; this subclass leaves videos
    to vLLM's own per-video pass (which does validate them), so that call goes through.
    """
    from r1vision.vision.processor import PROCESSOR_CLASSES

    base = PROCESSOR_CLASSES[family]

    def validate_inputs(self: Any, images: Any = None, text: Any = None, videos: Any = None, **kwargs: Any):
        token = getattr(self, "video_token", None)
        if videos is None and token and text is not None:
            text = text.replace(token, "") if isinstance(text, str) else [t.replace(token, "") for t in text]
        return base.validate_inputs(self, images=images, text=text, videos=videos, **kwargs)

    return type(f"VLLM{base.__name__}", (base,), {"validate_inputs": validate_inputs})


def _patch_vllm_module(module: types.ModuleType) -> None:
    _patch_processing_info(module, *_VLLM_QWEN_INFOS[module.__name__])


def _patch_processing_info(module: types.ModuleType, info_name: str, family: str) -> None:
    info_cls = getattr(module, info_name, None)
    if info_cls is None or getattr(info_cls.get_hf_processor, "_r1vision", False):
        return
    processor_cls = vllm_processor_class(family)

    def get_hf_processor(self: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("use_fast", True)
        return with_video_processor(self.ctx.get_hf_processor(processor_cls, **kwargs))

    get_hf_processor._r1vision = True  # type: ignore[attr-defined]
    info_cls.get_hf_processor = get_hf_processor


def apply() -> bool:
    """Apply the shims in this process (idempotent); returns whether they were needed."""
    global _APPLIED
    if _APPLIED:
        return True
    if torchvision_available():
        return False
    from r1vision.vision.processor import register_processors

    register_processors()
    _alias_torchvision_image_module()
    # Importing vLLM's model modules here would pull the model stack into every vLLM process at start-up
    # (and before the platform is set up): each is patched as it loads.
    for name in _VLLM_QWEN_INFOS:
        patch_on_import(name, _patch_vllm_module)
    _APPLIED = True
    logger.debug("r1vision: vLLM torchvision-free shims applied")
    return True


def register() -> None:
    """Entry point of the ``vllm.general_plugins`` group: vLLM calls it once in each of its processes."""
    apply()
