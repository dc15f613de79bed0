"""Model set-up shared by GRPO and SFT: processor with the pixel budget, vision freezing, LoRA, metrics.csv.

The family and budget facts themselves live in :mod:`r1vision.vision` (one rule for every consumer).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from r1vision.trainer.checkpoint import note_previous_run
from r1vision.trainer.metrics_csv import MetricsCSVCallback
from r1vision.trainer.preemption import PreemptionCallback
from r1vision.trainer.sample_log import SampleLogCallback
from r1vision.trainer.validation import validate_dataset
from r1vision.vision.budget import PixelBudget, apply_budget_to_processor, resolve_budget
from r1vision.vision.family import LM_LINEAR_NAMES, is_vision_param, model_family_or_none
from r1vision.vision.video import VideoBudget
from r1vision.vision.video_processor import video_budget_from_args

logger = logging.getLogger(__name__)

__all__ = ["freeze_vision_tower", "is_vision_param", "lora_config", "prepare_vision_training"]


def freeze_vision_tower(model: Any) -> int:
    """Set ``requires_grad=False`` on every vision parameter; return how many tensors were frozen."""
    n = 0
    for name, param in model.named_parameters():
        if is_vision_param(name):
            param.requires_grad_(False)
            n += 1
    if n == 0:
        raise ValueError(
            "freeze_vision_tower: found no vision parameters (expected names containing 'visual.')"
        )
    return n


def lora_config(r: int, alpha: int, dropout: float, target: str | list[str], **extra: Any):
    """A peft ``LoraConfig`` on the language model's linear layers only (the vision tower never gets adapters).

    ``target``: ``"all-linear-lm"`` or module names (a list, or one comma-separated string); ``extra``: more
    ``LoraConfig`` options (``use_rslora``, ``use_dora``, ``modules_to_save``, ``target_parameters``,
    ``task_type``), ``None`` values left out."""
    from peft import LoraConfig

    names_given = [target] if isinstance(target, str) else list(target)
    target = ",".join(names_given)
    if target == "all-linear-lm":
        names = "|".join(LM_LINEAR_NAMES)
        # Regex on full module names: language-model projections only (Qwen-VL, LLaVA, Gemma 3:
        # ``language_model``; Idefics3 / SmolVLM: ``text_model``); vision blocks reuse some names.
        target_modules: Any = rf"^(?!.*(visual|vision)).*(language_model|text_model).*\.({names})$"
        exclude = None
    else:
        target_modules = [t.strip() for t in target.split(",") if t.strip()]
        # user-named modules may exist in the vision tower too (e.g. "qkv", "proj", "q_proj")
        exclude = r".*(visual|vision_tower|vision_model|multi_modal_projector|connector).*"
    options = {"task_type": "CAUSAL_LM"} | {k: v for k, v in extra.items() if v is not None}
    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        exclude_modules=exclude,
        **options,
    )


@dataclass
class VisionSetup:
    """What both trainers prepare before calling their TRL parent's ``__init__``."""

    family: str | None  # None: not a Qwen-VL family (no pixel budget; trained as stock TRL would)
    processor: Any
    budget: PixelBudget | None
    peft_config: Any
    callbacks: list
    video_budget: VideoBudget | None = None  # None: not a Qwen-VL family (videos are refused)


def prepare_vision_training(
    model: Any,
    args: Any,
    processing_class: Any,
    peft_config: Any,
    callbacks: list | None,
    datasets: list[Any],
) -> VisionSetup:
    """Family, processor with the pixel budget, validated datasets, vision-free LoRA and metrics.csv.

    Validation runs here, before any model weights are touched, so bad rows fail in seconds.
    """
    import os

    from transformers import AutoConfig, AutoProcessor

    model_id = model if isinstance(model, str) else model.config._name_or_path
    model_config = AutoConfig.from_pretrained(model) if isinstance(model, str) else model.config
    family = model_family_or_none(model_config)
    processor = processing_class or AutoProcessor.from_pretrained(model_id)
    budget = video_budget = None
    if family is not None:
        budget = resolve_budget(family, args.min_pixels, args.max_pixels, processor)
        apply_budget_to_processor(processor, budget)
        video_budget = video_budget_from_args(family, args, processor)
    else:  # a drop-in for TRL's trainer: other families train as TRL would, with what applies to them
        logger.warning(
            "model type %r is not a Qwen-VL family: r1vision's pixel budget (min/max_pixels), image-token "
            "placeholder checks and sequence-length checks do not apply; images go to its processor as "
            "they are (dataset validation, LoRA targeting and the rewards do apply)",
            getattr(model_config, "model_type", "?"),
        )
    for dataset in datasets:
        if dataset is not None and not isinstance(dataset, dict):
            validate_dataset(dataset, args.image_root, args.validate_rows)
    if peft_config is None and args.lora_r > 0:
        from r1vision.trainer.config import lora_extras

        peft_config = lora_config(
            args.lora_r, args.lora_alpha, args.lora_dropout, args.lora_target_modules, **lora_extras(args)
        )
    callbacks = list(callbacks or [])
    if args.metrics_csv:
        callbacks.append(MetricsCSVCallback(os.path.join(args.output_dir, "metrics.csv")))
    callbacks.append(PreemptionCallback())  # a signal stops the run at a step boundary with a checkpoint
    callbacks.append(SampleLogCallback())  # which rows each step trained on (r1vision_samples.jsonl)
    return VisionSetup(family, processor, budget, peft_config, callbacks, video_budget)


class VisionSetupMixin:
    """For the r1vision trainers: the set-up they share before TRL's ``__init__``."""

    model_family: str | None
    pixel_budget: PixelBudget | None
    video_budget: VideoBudget | None

    def _prepare_vision(
        self,
        model: Any,
        args: Any,
        processing_class: Any,
        peft_config: Any,
        callbacks: list | None,
        datasets: list,
    ) -> tuple[Any, Any, list]:
        """:func:`prepare_vision_training`; keeps the family and budget, returns what TRL's ``__init__`` takes:
        ``(processing_class, peft_config, callbacks)``."""
        setup = prepare_vision_training(model, args, processing_class, peft_config, callbacks, datasets)
        self.model_family, self.pixel_budget = setup.family, setup.budget
        self.video_budget = setup.video_budget
        return setup.processor, setup.peft_config, setup.callbacks

    def _init_trl(self, args: Any, **trl_kwargs: Any) -> None:
        """TRL's ``__init__`` (the next class in the MRO) with the prepared arguments, then the optional
        vision-tower freeze, which needs the model TRL has loaded."""
        # the next class is TRL's, so CheckpointRenameMixin's __init__ is passed over: note the folder here
        note_previous_run(self, args.output_dir)
        super().__init__(args=args, **trl_kwargs)  # type: ignore[call-arg]
        callbacks = self.callback_handler.callbacks  # type: ignore[attr-defined]
        self._sample_log = next((c for c in callbacks if isinstance(c, SampleLogCallback)), None)
        if args.freeze_vision_tower:
            freeze_vision_tower(self.model)  # type: ignore[attr-defined]


def drop_vision_input_grad_hooks(model: Any) -> int:
    """Remove the input-requires-grad hooks transformers put on the vision tower's input embedding.

    TRL calls ``enable_input_require_grads()`` for LoRA with gradient checkpointing; transformers hooks the
    input embeddings of *every* sub-model, so Qwen-VL's ``visual.patch_embed`` output requires grad and
    autograd keeps (and, with checkpointing, recomputes) the frozen tower's graph for nothing. The language
    model's hook, the one LoRA needs, stays. Returns how many hooks were removed.
    """
    removed = 0
    for module in model.modules():
        hooks = getattr(module, "_require_grads_hooks", None)
        if not hooks:
            continue
        keep = []
        for handle in hooks:
            owner = _hook_owner(module, handle)
            if owner is not None and is_vision_param(owner + ".weight"):
                handle.remove()
                removed += 1
            else:
                keep.append(handle)
        module._require_grads_hooks = keep
        if hasattr(module, "_require_grads_hook"):
            module._require_grads_hook = keep[0] if keep else None
    return removed


def _hook_owner(root: Any, handle: Any) -> str | None:
    """The name (below ``root``) of the module whose forward hooks hold ``handle``."""
    for name, module in root.named_modules():
        if handle.id in getattr(module, "_forward_hooks", {}):
            return name
    return None
