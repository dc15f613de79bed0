"""Qwen2-VL / Qwen2.5-VL: the text after a video starts where Qwen's own M-RoPE starts it.

Qwen's reference position code (the Qwen2-VL and Qwen2.5-VL releases, and vLLM) starts the text after a
vision block at the block's largest position + 1. transformers 5.x (5.23 pinned here) advances by
``max(h, w) / merge`` alone and ignores the temporal axis. For an image (one temporal step) the two agree;
for a video whose temporal positions (``(t - 1) x interval``; Qwen2.5-VL's interval is
``tokens_per_second x seconds per step``) reach past its spatial ones, transformers starts the following
text inside the video's positions. The trainer's log-probabilities then differ from vLLM's (measured on the
tiny Qwen2.5-VL: 4.5e-3 per token after a 2-step clip) and from the positions the model was pretrained with.

:func:`apply` wraps both models' ``get_rope_index``: every token after a vision block is moved up by what
its text start lacks (:func:`reference_positions`), and the returned ``rope_deltas`` follow, so
generation continues from the same place. Positions of images and of videos that do not reach past their
spatial extent are unchanged. Qwen3-VL and later place a timestamp between frames and already agree.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from typing import Any

import torch

from r1vision.import_hooks import patch_on_import

_WRAPPED = "_r1vision_reference_positions"


def reference_positions(
    position_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(position_ids, rope_deltas)`` with each text run after a vision block starting at that block's
    largest position + 1 (later tokens moved by the same amount). ``position_ids``: ``(3, batch, seq)``
    from transformers' ``get_rope_index``; ``mm_token_type_ids``: 0 text, 1 image, 2 video."""
    out = position_ids.clone()
    deltas = []
    for b in range(out.shape[1]):
        keep = (
            attention_mask[b].bool()
            if attention_mask is not None
            else torch.ones(out.shape[2], dtype=torch.bool, device=out.device)
        )
        pos = out[:, b, keep]
        shift, vision_max, start = 0, None, 0
        for kind, run in itertools.groupby(mm_token_type_ids[b][keep].tolist()):
            end = start + len(list(run))
            pos[:, start:end] += shift
            if kind == 0:
                if vision_max is not None:  # text rows hold one position on all three axes
                    extra = int(vision_max) + 1 - int(pos[0, start])
                    pos[:, start:end] += extra
                    shift += extra
                vision_max = None
            else:
                top = int(pos[:, start:end].max())
                vision_max = top if vision_max is None else max(vision_max, top)
            start = end
        out[:, b, keep] = pos
        deltas.append(int(pos.max()) + 1 - int(keep.sum()) if pos.numel() else 0)
    return out, torch.tensor(deltas, device=out.device, dtype=position_ids.dtype).unsqueeze(1)


def _wrap(method: Any) -> Any:
    signature = inspect.signature(method)

    @functools.wraps(method)
    def get_rope_index(self: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        position_ids, deltas = method(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs).arguments
        if bound.get("video_grid_thw") is None or bound.get("mm_token_type_ids") is None:
            return position_ids, deltas  # images only: transformers already agrees with the reference
        fixed, new_deltas = reference_positions(
            position_ids, bound["mm_token_type_ids"], bound.get("attention_mask")
        )
        return fixed, new_deltas.to(deltas.device, deltas.dtype).reshape(deltas.shape)

    setattr(get_rope_index, _WRAPPED, True)
    return get_rope_index


_MODULES = {
    "transformers.models.qwen2_vl.modeling_qwen2_vl": "Qwen2VLModel",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl": "Qwen2_5_VLModel",
}


def _patch_module(module: Any) -> None:
    cls = getattr(module, _MODULES[module.__name__], None)
    if cls is not None and not getattr(cls.get_rope_index, _WRAPPED, False):
        cls.get_rope_index = _wrap(cls.get_rope_index)


def apply() -> None:
    """Wrap Qwen2-VL's and Qwen2.5-VL's ``get_rope_index`` now if their modules are loaded, else as they
    load (idempotent)."""
    for name in _MODULES:
        patch_on_import(name, _patch_module)
