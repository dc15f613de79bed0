"""LoRA outputs as stand-alone models: ``r1vision merge ADAPTER --output_dir DIR`` and ``--model ADAPTER`` everywhere.

A LoRA run saves an adapter (``adapter_config.json`` + ``adapter_model.safetensors``), which stock
transformers and vLLM cannot load as a model. :func:`merge_adapter` folds it into its base model and
writes a complete folder (weights, config, processor, r1vision's run settings). Training leaves one in
``<output_dir>/merged``; :func:`resolve_model` turns any ``--model`` that names an adapter folder into
that merged folder (merging on first use), so ``infer``, ``grpo``, ``sft`` and ``vllm-serve`` take it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from r1vision.vision.hub_layout import write_hub_layout

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
MERGED_SUBDIR = "merged"
# Files describing the run that travel with the merged weights (see r1vision.trainer.run_info).
_CARRIED = ("r1vision_run.json",)


def silence_peft_deprecation() -> None:
    """Hide transformers 5.23's FutureWarnings for the *model methods* TRL 1.16 and peft 0.21 call
    (``gradient_checkpointing_enable/disable``, ``is_gradient_checkpointing``): no user setting causes
    them and none can avoid them. The config field's warning (``gradient_checkpointing`` in a recipe)
    stays visible; r1vision's configs map that field to ``activation_checkpointing`` themselves."""
    warnings.filterwarnings(
        "ignore",
        message="`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)` "
        "is deprecated",
        category=FutureWarning,
    )


silence_peft_deprecation()


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """True for a folder that holds a PEFT adapter and no full model config."""
    p = Path(path)
    return (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def adapter_base(adapter_dir: str | os.PathLike) -> str:
    """The adapter's base model: an existing folder (absolute, or relative to the cwd or the adapter) or a Hub id."""
    cfg = json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text())
    base = cfg.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{adapter_dir}/{ADAPTER_CONFIG} names no base_model_name_or_path")
    for cand in (Path(base), Path(adapter_dir) / base):
        if cand.is_dir():
            return str(cand.resolve())
    if Path(base).is_absolute() or base.startswith((".", "/")) or base.count("/") > 1:
        raise FileNotFoundError(
            f"the base model of adapter {adapter_dir} ({base!r}, from {ADAPTER_CONFIG}) does not exist; "
            "pass it with `r1vision merge ADAPTER --base PATH --output_dir DIR`"
        )
    return base  # a Hub id


def record_absolute_base(adapter_dir: str | os.PathLike, base: str) -> None:
    """Rewrite the adapter's base as an absolute path when it is a local folder (relative paths break)."""
    path = Path(adapter_dir) / ADAPTER_CONFIG
    if not path.is_file() or not Path(base).is_dir():
        return
    cfg = json.loads(path.read_text())
    cfg["base_model_name_or_path"] = str(Path(base).resolve())
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True))


@contextmanager
def _whole_model_loading() -> Iterator[None]:
    """``from_pretrained`` as outside any DeepSpeed run. At the end of a ZeRO-3 run transformers still sees
    the run's ZeRO-3 config and would build the base model partitioned (``deepspeed.zero.Init``), with
    collectives every rank must join; the merge runs on the main process alone, so on 2+ processes it hung
    there for ever. The config is restored after."""
    from transformers.integrations import deepspeed as hf_deepspeed

    ref = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = ref


def merge_adapter(
    adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, base: str | None = None
) -> Path:
    """Load ``base`` (default: the adapter's recorded base), apply the adapter, merge and save to ``out_dir``.

    The result holds the weights, the config, the processor (the adapter folder's when it has one, so the
    pixel budget saved with the run is kept) and the run settings; it loads with stock transformers.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    adapter_dir, out = Path(adapter_dir), Path(out_dir)
    if not (adapter_dir / ADAPTER_CONFIG).is_file():
        raise FileNotFoundError(f"{adapter_dir} holds no {ADAPTER_CONFIG}: not a LoRA adapter folder")
    base = base or adapter_base(adapter_dir)
    with _whole_model_loading():
        model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # concurrent ranks never share one
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    write_hub_layout(tmp)
    has_processor = any(
        (adapter_dir / f).is_file() for f in ("processor_config.json", "preprocessor_config.json")
    )
    AutoProcessor.from_pretrained(str(adapter_dir) if has_processor else base).save_pretrained(tmp)
    for name in _CARRIED + STOCK_EXTRA_FILES:
        if (adapter_dir / name).is_file():
            shutil.copyfile(adapter_dir / name, tmp / name)
    copy_stock_files(base, tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # a half-written merge is never mistaken for a model
    return out


# What the base checkpoint ships for stock loaders that r1vision's image-only processor does not write:
# stock Qwen-VL processors (transformers with torchvision, vLLM) load a video processor from it.
STOCK_EXTRA_FILES = ("video_preprocessor_config.json",)


def copy_stock_files(base: str, out_dir: str | os.PathLike) -> list[str]:
    """Copy :data:`STOCK_EXTRA_FILES` from ``base`` (a folder, or a Hub id already in the local cache) into
    ``out_dir``; returns the names copied. Never downloads. The base's own file wins over one written from
    the image settings when its processor was saved (its video settings are the checkpoint's real ones)."""
    copied = []
    for name in STOCK_EXTRA_FILES:
        target = Path(out_dir) / name
        source: str | None = str(Path(base) / name) if Path(base).is_dir() else None
        if source is None:
            try:
                from huggingface_hub import try_to_load_from_cache

                cached = try_to_load_from_cache(base, name)
                source = cached if isinstance(cached, str) else None
            except Exception:  # not a Hub id, or no cache: nothing to copy
                source = None
        if source and Path(source).is_file():
            shutil.copyfile(source, target)
            copied.append(name)
    return copied


def resolve_model(model: str) -> str:
    """``model`` itself, or for an adapter folder its merged model (``<adapter>/merged``, built on first use)."""
    if not model or not is_adapter_dir(model):
        return model
    merged = Path(model) / MERGED_SUBDIR
    if not (merged / "config.json").is_file():
        logger.warning("%s is a LoRA adapter; merging it into its base model at %s", model, merged)
        merge_adapter(model, merged)
    return str(merged)
