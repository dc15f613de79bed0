"""TRL's fused LM head, made to project only the labelled positions on a CPU, as it does on a GPU.

TRL 1.16's ``add_fused_lm_head`` (``model(..., labels=..., fused_lm_head=True)``, GRPO's log-prob pass)
projects only the positions whose label is not ``-100`` where Triton runs (CUDA, XPU). Elsewhere it
projects every position, because on an XLA device (Neuron) a changing count of labelled positions would
recompile the graph on every batch. A CPU recompiles nothing, so there the whole-sequence projection is
only waste: GRPO labels the completion alone, and a Qwen-VL prompt carries hundreds of image and text
tokens, each run over the whole vocabulary (151,936 columns) in the policy, old-policy and reference
passes and again in the backward. On the MAYE geometry recipe (336 px diagrams, 16 new tokens) that was
~200 projected rows per rollout instead of 16: one step of 128 rollouts took 140 s on a CPU core.

:func:`labelled_positions_only` swaps the one name the head consults for that choice, only while the
trainer's own log-prob pass runs; the tile kernel (which also asks ``_use_triton``, to pick Triton or its
torch fold) is untouched. The completion positions' values are the same computation on fewer rows.

SFT's loss (the same head in TRL's ``SFTTrainer``) is left as TRL runs it: compacted there too, its values
agree to float rounding, but the quick motion demo's SFT sits on a loss plateau that rounding decides when
it leaves (measured 2026-11-29: identical losses to step 260, then i.i.d. accuracy 98 % vs 58 %), so that
change waits for a demo that does not hang on one seed's rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import trl.trainer.utils as _head

__all__ = ["labelled_positions_only", "projects_labelled_only"]


@contextlib.contextmanager
def labelled_positions_only() -> Iterator[None]:
    """While active, TRL's fused head projects only labelled positions on a CPU too."""
    original = _head._use_triton
    _head._use_triton = lambda device: device.type == "cpu" or bool(original(device))
    try:
        yield
    finally:
        _head._use_triton = original


def projects_labelled_only(device: torch.device) -> bool:
    """Whether TRL's fused head, called now, projects only the labelled positions on ``device``."""
    return bool(_head._use_triton(device))
