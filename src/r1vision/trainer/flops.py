"""Counted model FLOPs: the compute a model's forward passes actually ran, independent of any clock.

Wall time and process CPU time both depend on machine load (on a shared 2-core box the same GRPO work
cost 2.8-3.6x more CPU seconds under contention), so a compute budget that must be fair between two
training runs counts FLOPs instead. Hooks on the model add, for every forward that runs (generation
prefill and each KV-cached decode step, log-prob, reference and training forwards):

- text decoder (dense): ``2 * W * B*T + 4 * L * d_attn * B*T*T_k``. ``W`` is the weight count of the
  decoder's ``nn.Linear`` layers (embeddings are lookups and norms are not matmuls, so neither counts);
  ``B*T`` the positions in the call, padding included because it is computed; ``T_k`` the attended
  positions (cached + new). The second term is the attention scores and weighted values over the full
  ``T x T_k`` matrix, as a masked kernel computes them.
- LM head: ``2 * V * H`` per projected row: one row per sequence per decode step, and for TRL's fused
  head (``model(..., fused_lm_head=True)``, used by TRL 1.16's SFT and GRPO losses) every position but
  the last, or only the labelled positions on Triton devices and in r1vision's GRPO log-prob pass, as the
  head does (:mod:`r1vision.trainer.fused_head`).
- vision tower: ``2 * weight * rows`` of each ``nn.Linear``/``nn.ConvNd`` it runs (patch embedding,
  blocks, and the merger at merged resolution), plus ``4 * width * sum(len**2)`` for its attention over
  each image (or window) that ``cu_seqlens`` delimits.

A forward that autograd records adds its backward: the input gradient (one more forward's worth) and,
for trainable weights, the weight gradient (one more), so a fully trainable model counts 3x; the patch
embedding, whose input (pixels) needs no gradient, counts 2x; TRL's fused head recomputes its logits in
the backward, so it counts 4x. (The decoder's trainable weights are read when the counter attaches.)
These are model FLOPs in the sense of MFU (PaLM, 2022): gradient checkpointing's recomputed forwards are
not counted, so a memory setting does not change a compute budget. Also not counted: element-wise ops,
norms, softmax, the optimiser, and generation outside the model (vLLM).
HF ``Trainer``'s own ``total_flos`` (6 x parameters x input tokens) does not see GRPO's generation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback

from r1vision.trainer.fused_head import projects_labelled_only

__all__ = ["FlopCounter", "FlopCounterCallback", "format_flops"]

VISION_TOWERS = ("visual", "vision_tower", "vision_model")
PARTS = ("text", "attention", "lm_head", "vision")


def format_flops(flops: float) -> str:
    """``1.23 TFLOP``-style text."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def _backward(x: torch.Tensor | None, trainable: bool) -> bool:
    """Whether autograd will run a backward through this call (it records only with gradients enabled)."""
    return torch.is_grad_enabled() and (trainable or (x is not None and x.requires_grad))


def _vision_tower(model: nn.Module) -> nn.Module | None:
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in VISION_TOWERS:
            return module
    return None


class FlopCounter:
    """Adds the FLOPs of every forward of the attached models to ``counts`` (see the module docstring).

    Use as ``with FlopCounter(model) as c: ...`` or ``attach``/``detach``; ``total`` is the sum of the
    parts, ``positions`` the text-decoder positions processed (padding included).
    """

    def __init__(self, *models: nn.Module) -> None:
        self.counts: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self.positions = 0
        self._handles: list[Any] = []
        self._attached: set[int] = set()
        for model in models:
            self.attach(model)

    @property
    def total(self) -> float:
        return float(sum(self.counts.values()))

    def attach(self, model: nn.Module) -> FlopCounter:
        """Hook ``model`` (a causal LM or VLM with ``get_decoder``/``get_output_embeddings``); idempotent.

        Which weights are trainable is read here: freeze or unfreeze before attaching.
        """
        if id(model) in self._attached:
            return self
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        if decoder is None or head is None:
            raise ValueError(f"{type(model).__name__}: no decoder or LM head to count FLOPs on")
        self._attached.add(id(model))
        cfg = decoder.config
        layers, heads = int(cfg.num_hidden_layers), int(cfg.num_attention_heads)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        linears = [m.weight for m in decoder.modules() if isinstance(m, nn.Linear)]
        weights = sum(w.numel() for w in linears)
        trainable = sum(w.numel() for w in linears if w.requires_grad)
        trainable += sum(p.numel() for n, p in decoder.named_parameters() if "lora_" in n and p.requires_grad)
        hook = self._decoder_hook(weights, trainable, layers * heads * head_dim)
        h = self._handles
        h.append(decoder.register_forward_pre_hook(hook, with_kwargs=True))
        h.append(head.register_forward_hook(self._matmul_hook("lm_head")))
        # Only the patched forward of TRL's fused head bypasses ``head``'s own forward.
        h.append(model.register_forward_hook(self._fused_head_hook(head), with_kwargs=True))
        tower = _vision_tower(model)
        for m in () if tower is None else tower.modules():
            if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d):
                h.append(m.register_forward_hook(self._matmul_hook("vision")))
            elif type(m).__name__.endswith("Attention"):
                h.append(m.register_forward_pre_hook(self._vision_attention_hook(), with_kwargs=True))
        return self

    def detach(self) -> None:
        """Remove every hook; the counts stay."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._attached.clear()

    def __enter__(self) -> FlopCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def _decoder_hook(self, weights: int, trainable: int, attn_width: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            x = kwargs.get("inputs_embeds")
            if x is None:
                x = kwargs.get("input_ids", args[0] if args else None)
            if x is None:
                return
            batch, new = int(x.shape[0]), int(x.shape[1])
            cache = kwargs.get("past_key_values")
            past = int(cache.get_seq_length()) if cache is not None else 0
            back = _backward(x, trainable > 0)
            # Backward: input gradients through every weight, weight gradients for the trainable ones.
            matmul = weights + (weights + trainable if back else 0)
            self.positions += batch * new
            self.counts["text"] += 2.0 * matmul * batch * new
            self.counts["attention"] += (3 if back else 1) * 4.0 * attn_width * batch * new * (past + new)

        return hook

    def _matmul_hook(self, part: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            w = module.weight
            x = args[0] if args else None
            rows = output.numel() // w.shape[0]  # output positions (conv) or rows (linear)
            grads = torch.is_grad_enabled() and int(w.requires_grad) + int(x is not None and x.requires_grad)
            self.counts[part] += (1 + grads) * 2.0 * w.numel() * rows

        return hook

    def _vision_attention_hook(self):
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            x = kwargs.get("hidden_states", args[0] if args else None)
            if x is None:
                return
            bounds = kwargs.get("cu_seqlens", args[1] if len(args) > 1 else None)
            if bounds is not None:  # Qwen towers: attention within each image (or window)
                square = float((bounds[1:] - bounds[:-1]).double().pow(2).sum())
            else:
                square = float(x.shape[0] * x.shape[-2] ** 2) if x.dim() == 3 else float(x.shape[0] ** 2)
            back = _backward(x, False)
            self.counts["vision"] += (3 if back else 1) * 4.0 * x.shape[-1] * square

        return hook

    def _fused_head_hook(self, head: nn.Module):
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
            if not kwargs.get("fused_lm_head"):
                return
            labels = kwargs.get("shift_labels")
            if labels is None and kwargs.get("labels") is not None:
                labels = kwargs["labels"][:, 1:]
            if labels is None:
                return
            rows = (
                int((labels != -100).sum()) if projects_labelled_only(head.weight.device) else labels.numel()
            )
            passes = 1
            if torch.is_grad_enabled():
                # The kernel's backward recomputes the logits, then forms the hidden-state gradient and,
                # for a trainable head, the weight gradient.
                passes += 2 + int(head.weight.requires_grad)
            self.counts["lm_head"] += passes * 2.0 * head.weight.numel() * rows

        return hook


class FlopCounterCallback(TrainerCallback):
    """Counts a ``Trainer``'s model FLOPs from ``train()``'s start to its end into ``counter``.

    ``extra_models``: other models the trainer runs (e.g. GRPO's reference model when ``beta > 0``).
    Each process counts its own forwards; with several processes, sum the counters for the run's total.
    """

    def __init__(self, counter: FlopCounter | None = None, extra_models: Iterable[nn.Module] = ()) -> None:
        self.counter = counter or FlopCounter()
        self.extra_models = [m for m in extra_models if m is not None]

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        for m in [model, *self.extra_models]:
            if m is not None:
                self.counter.attach(m)

    def on_train_end(self, args, state, control, **kwargs):
        self.counter.detach()
