"""Per-GPU memory of a text-to-image GRPO run (SD3 / SD3.5) before you book the GPU.

Parameter counts are exact: every component (denoiser, the three text encoders, the VAE) is built from
its config on the ``meta`` device (no weights, no download; ``sd3.5-medium`` is built in (``data/pipeline_shapes``), or give a local
diffusers folder). Training activations are *measured* the same way: the denoiser's training forward runs
on meta tensors at the real widths and sequence lengths, and every tensor autograd keeps for the backward
is counted once (parameters excluded; attention counted as a flash / memory-efficient kernel keeps it:
q, k, v, output and the log-sum-exp, not the attention matrix the CPU's math kernel would keep). One
regular block, the last block and a dual-attention block are measured and scaled to the model's depth.
With gradient checkpointing a block keeps only its inputs, plus one block's activations while it is
recomputed.

What is modelled, per GPU (each line of the report): the denoiser's weights in ``denoiser_dtype``; the
frozen text encoders in bf16 (fp32 without ``--bf16``); the VAE in fp32; LoRA (or full) trainable
parameters with fp32 gradients and AdamW's two fp32 moments; the EMA copy of the trained weights; the
training forward's activations for ``batch`` images (x2 rows with classifier-free guidance); the rollout's
transient (the no-grad forward of every image of the step at once, plus the recorded latents); and the
VAE decode (``DECODE_CHUNK`` images at a time; its last up block at full resolution, four live fp32
maps of 128 channels: an estimate). Peak = the static part + the largest transient. A fixed 2 GiB covers the CUDA context and
fragmentation. Activations are in the denoiser's dtype (the trainer runs it without autocast); ±20 %.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from r1vision.diffusion.config import SD3_LORA_TARGETS
from r1vision.diffusion.families import DECODE_CHUNK

GIB = 1024**3
OVERHEAD_BYTES = 2 * GIB
BUILTIN = {"sd3.5-medium": "sd3.5-medium", "stabilityai/stable-diffusion-3.5-medium": "sd3.5-medium"}
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class T2ISetup:
    """The run being planned: images per micro-batch (``per_device_train_batch_size x num_generations``
    images are rolled out per step; ``batch`` of them train in one backward)."""

    resolution: int = 512
    batch: int = 8  # images per training forward
    rollout_images: int = 32  # images sampled per step on this GPU
    rollout_batch: int = 0  # images sampled at once (rollout_batch_size); 0 = all of them
    steps: int = 10
    guidance: bool = True
    lora_r: int = 32
    lora_targets: tuple[str, ...] = ()
    denoiser_dtype: str = "float32"
    bf16: bool = True
    gradient_checkpointing: bool = True
    text_tokens: int = 77 + 256  # CLIP + T5 tokens of the joint sequence
    ema: bool = True


def load_shape(model: str) -> dict[str, dict[str, Any]]:
    """Component configs: a built-in name, or a local diffusers folder (``model_index.json``)."""
    name = BUILTIN.get(model.lower())
    if name:
        text = (resources.files("r1vision") / "data" / "pipeline_shapes" / f"{name}.json").read_text()
        return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}
    folder = Path(model)
    if not (folder / "model_index.json").is_file():
        raise ValueError(
            f"{model}: not a diffusers folder (no model_index.json) and not a built-in shape ({sorted(set(BUILTIN.values()))})"
        )
    shape = {}
    for part in ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "vae"):
        path = folder / part / "config.json"
        if path.is_file():
            shape[part] = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    if "transformer" not in shape:
        raise ValueError(f"{model}: no transformer/config.json (an SD3/SD3.5 pipeline folder is needed)")
    return shape


def _build(part: str, cfg: dict[str, Any], dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in the dtype, not cast (a cast warns about fp32 modules)
    try:
        with torch.device("meta"):
            return _construct(part, cfg)
    finally:
        torch.set_default_dtype(previous)


def _construct(part: str, cfg: dict[str, Any]) -> torch.nn.Module:
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    if part == "transformer":
        return SD3Transformer2DModel.from_config(cfg)
    if part == "vae":
        return AutoencoderKL.from_config(cfg)
    if part == "text_encoder_3":
        return T5EncoderModel(T5Config(**cfg))
    return CLIPTextModelWithProjection(CLIPTextConfig(**cfg))


def _count(module: torch.nn.Module) -> int:
    """Parameters plus persistent buffers (SD3's position table is a 226 M-element buffer at 384 x 384)."""
    return sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())


def component_params(shape: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Elements per component, counted on the meta device."""
    return {part: _count(_build(part, cfg)) for part, cfg in shape.items()}


class _FlashLikeAttention(torch.autograd.Function):
    """Shapes of what a flash / memory-efficient attention kernel keeps for its backward."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # pragma: no cover - never run (meta)
        raise RuntimeError("measurement only")


@contextlib.contextmanager
def _flash_like_sdpa():
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def sdpa(q, k, v, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _FlashLikeAttention.apply(q, k, v)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _saved_bytes(tcfg: dict[str, Any], layers: int, dual: tuple[int, ...], setup: T2ISetup, rows: int) -> int:
    """Bytes autograd keeps for the backward of one training forward of ``rows`` rows (meta device)."""
    from peft import LoraConfig, get_peft_model

    cfg = {**tcfg, "num_layers": layers, "dual_attention_layers": list(dual)}
    dtype = getattr(torch, setup.denoiser_dtype)
    model = _build("transformer", cfg, dtype)
    if setup.lora_r:
        model.requires_grad_(False)
        targets = list(setup.lora_targets) or _default_targets()
        model = get_peft_model(
            model, LoraConfig(r=setup.lora_r, lora_alpha=2 * setup.lora_r, target_modules=targets)
        )
    weights = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}
    keep: list[torch.Tensor] = []  # alive until counted, so no storage address is reused

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        if key not in weights:
            seen[key] = t.untyped_storage().nbytes()
            keep.append(t)
        return t

    side = setup.resolution // 8  # latent side (VAE factor 8)
    channels = int(tcfg.get("in_channels", 16))
    with (
        torch.device("meta"),
        _flash_like_sdpa(),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
    ):
        model(
            hidden_states=torch.empty(rows, channels, side, side, dtype=dtype),
            timestep=torch.empty(rows),
            encoder_hidden_states=torch.empty(
                rows, setup.text_tokens, int(tcfg["joint_attention_dim"]), dtype=dtype
            ),
            pooled_projections=torch.empty(rows, int(tcfg["pooled_projection_dim"]), dtype=dtype),
            return_dict=False,
        )
    return sum(seen.values())


def _default_targets() -> list[str]:

    return list(SD3_LORA_TARGETS)


def activation_bytes(tcfg: dict[str, Any], setup: T2ISetup, rows: int) -> dict[str, int]:
    """Training-forward activations for ``rows`` rows, measured on 1-2 blocks and scaled to the depth."""
    layers = int(tcfg["num_layers"])
    duals = [i for i in tcfg.get("dual_attention_layers") or () if i < layers - 1]
    last = _saved_bytes(tcfg, 1, (), setup, rows)  # embeddings + the last (context-only) block
    two = _saved_bytes(tcfg, 2, (), setup, rows)
    block = two - last
    dual_extra = (_saved_bytes(tcfg, 2, (0,), setup, rows) - two) if duals else 0
    full = last + (layers - 1) * block + len(duals) * dual_extra
    if not setup.gradient_checkpointing:
        return {"activations": full, "block": block + dual_extra}
    elem = _BYTES[setup.denoiser_dtype]
    hidden = int(tcfg["num_attention_heads"]) * int(tcfg["attention_head_dim"])
    patch = int(tcfg.get("patch_size", 2))
    tokens = (setup.resolution // 8 // patch) ** 2
    inputs = rows * (tokens + setup.text_tokens + 1) * hidden * elem  # image + text streams + temb per block
    outside = last - (two - last)  # what is kept outside the blocks (embeddings, final layer)
    return {
        "activations": max(outside, 0) + layers * inputs + block + dual_extra,
        "block": block + dual_extra,
    }


def t2i_memory_report(model: str, setup: T2ISetup) -> dict[str, Any]:
    """Per-GPU bytes by line, and the peak."""
    shape = load_shape(model)
    counts = component_params(shape)
    frozen = 2 if setup.bf16 else _BYTES[setup.denoiser_dtype]
    den = _BYTES[setup.denoiser_dtype]
    tcfg = shape["transformer"]
    if setup.lora_r:
        from peft import LoraConfig, get_peft_model

        meta = _build("transformer", tcfg)
        meta.requires_grad_(False)
        targets = list(setup.lora_targets) or _default_targets()
        peft = get_peft_model(
            meta, LoraConfig(r=setup.lora_r, lora_alpha=2 * setup.lora_r, target_modules=targets)
        )
        trainable = sum(p.numel() for p in peft.parameters() if p.requires_grad)
    else:
        trainable = counts["transformer"]
    rows = setup.batch * (2 if setup.guidance else 1)
    act = activation_bytes(tcfg, setup, rows)
    hidden = int(tcfg["num_attention_heads"]) * int(tcfg["attention_head_dim"])
    tokens = (setup.resolution // 8 // int(tcfg.get("patch_size", 2))) ** 2
    at_once = min(setup.rollout_batch or setup.rollout_images, setup.rollout_images)
    roll_rows = at_once * (2 if setup.guidance else 1)
    elem = den
    # no-grad forward: the widest live tensors of one block (MLP hidden 4x plus the stream), all images at once
    rollout = roll_rows * (tokens + setup.text_tokens) * hidden * elem * 6
    latents = (
        setup.rollout_images
        * (setup.steps + 1)
        * int(tcfg.get("in_channels", 16))
        * (setup.resolution // 8) ** 2
        * 4
    )

    vae_decode = min(at_once, DECODE_CHUNK) * 4 * 128 * setup.resolution**2 * 4
    lines = {
        "denoiser weights": counts["transformer"] * den,
        "text encoders (frozen)": sum(
            counts.get(p, 0) for p in ("text_encoder", "text_encoder_2", "text_encoder_3")
        )
        * frozen,
        "vae (fp32)": counts.get("vae", 0) * 4,
        "trainable: weights + fp32 grads + AdamW": trainable * ((4 if setup.lora_r else 0) + 4 + 8),
        "EMA of the trained weights": trainable * 4 if setup.ema else 0,
        "recorded latents": latents,
        "training activations": act["activations"],
    }
    transients = {
        "rollout forward (no grad)": rollout,
        "VAE decode": vae_decode,
        "backward (gradients of one block's activations)": act["block"],
    }
    static = sum(lines.values()) + OVERHEAD_BYTES
    peak = static + max(transients.values())
    return {
        "model": model,
        "setup": setup.__dict__,
        "params": counts,
        "trainable_params": trainable,
        "lines": lines,
        "transients": transients,
        "overhead": OVERHEAD_BYTES,
        "peak": peak,
        "fits": {f"{gb} GB": peak <= gb * 1e9 for gb in (24, 40, 80, 141)},
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as aligned text lines."""
    s = report["setup"]
    out = [
        f"{report['model']}: {s['resolution']} px, {s['batch']} images per training forward"
        f"{' (x2 rows: CFG)' if s['guidance'] else ''}, {s['rollout_images']} rolled out per step, "
        + (f"LoRA r{s['lora_r']}" if s["lora_r"] else "full fine-tuning")
        + f", denoiser {s['denoiser_dtype']}, text encoders {'bf16' if s['bf16'] else s['denoiser_dtype']}"
        f"{', gradient checkpointing' if s['gradient_checkpointing'] else ''}",
        "params: "
        + ", ".join(f"{k} {v / 1e6:,.0f} M" for k, v in report["params"].items())
        + f"; trainable {report['trainable_params'] / 1e6:,.1f} M",
    ]
    for name, value in report["lines"].items():
        out.append(f"  {name:<46} {value / GIB:8.2f} GiB")
    out.append(f"  {'CUDA context + fragmentation':<46} {report['overhead'] / GIB:8.2f} GiB")
    for name, value in report["transients"].items():
        out.append(f"  transient: {name:<35} {value / GIB:8.2f} GiB")
    out.append(f"  {'peak (static + largest transient)':<46} {report['peak'] / GIB:8.2f} GiB")
    out.append("fits: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in report["fits"].items()))
    return "\n".join(out)
