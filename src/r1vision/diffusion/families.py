"""Model families for text-to-image GRPO: what the trainer needs from a diffusers pipeline.

A family turns prompts into conditioning, a latent at noise level ``sigma`` into a velocity (with
classifier-free guidance inside the policy) and latents into images. SD3 / SD3.5 come first
(:class:`SD3Family`, through ``diffusers.StableDiffusion3Pipeline``); FLUX and others implement the same
four methods. The denoiser (``family.transformer``) is what trains; text encoders and the VAE stay frozen.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MARKER = "r1vision_diffusion.json"


class _NoTorchvisionFallbackNote(logging.Filter):
    """Drops transformers' note that an image processor falls back to its PIL twin without torchvision:
    importing diffusers' SD3 pipeline names the SigLIP/CLIP processors of an image encoder these
    pipelines never use, and r1vision's CPU stack has no torchvision by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "requires torchvision (not installed); falling back to" not in record.getMessage()


class _Once(logging.Filter):
    """Passes each kind of message once: the SD3 pipeline warns about a truncated prompt on every encode
    (every rollout and evaluation batch), each time quoting the cut text, so a message is known by what
    precedes its first colon (the 1,018 OCR test prompts printed 2,036 lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.getMessage().split(":", 1)[0]
        if kind in self.seen:
            return False
        self.seen.add(kind)
        return True


logging.getLogger("transformers.utils.import_utils").addFilter(_NoTorchvisionFallbackNote())
logging.getLogger("diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3").addFilter(_Once())
DECODE_CHUNK = 8  # images per VAE decode call
# Flow-GRPO's LoRA targets on the SD3 MMDiT (scripts/train_sd3.py): the projections of each block's joint
# attention (`attn`, both streams). SD3.5's second, image-only attention (`attn2`) is left alone: a bare
# `to_k` would also match it (243 modules / 23.9 M parameters on SD3.5-M instead of 191 / 18.8 M).
SD3_LORA_TARGETS = [
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "attn.to_k",
    "attn.to_out.0",
    "attn.to_q",
    "attn.to_v",
]


@dataclass
class Conditioning:
    """Prompt embeddings (one row per sample) and, with guidance, those of the empty prompt."""

    embeds: torch.Tensor
    pooled: torch.Tensor
    neg_embeds: torch.Tensor | None = None
    neg_pooled: torch.Tensor | None = None

    def repeat(self, n: int) -> Conditioning:
        """Each row repeated ``n`` times in a row (one per generation of its prompt)."""
        rep = lambda t: None if t is None else t.repeat_interleave(n, dim=0)  # noqa: E731
        return Conditioning(rep(self.embeds), rep(self.pooled), rep(self.neg_embeds), rep(self.neg_pooled))

    def select(self, index: torch.Tensor | list[int]) -> Conditioning:
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return Conditioning(
            pick(self.embeds), pick(self.pooled), pick(self.neg_embeds), pick(self.neg_pooled)
        )


class SD3Family:
    """SD3 / SD3.5 (MMDiT, flow matching, CLIP-L + CLIP-G + T5): ``StableDiffusion3Pipeline`` components."""

    name = "sd3"

    def __init__(self, pipe: Any, decode: str = "vae", max_sequence_length: int = 128) -> None:
        self.pipe = pipe
        self.transformer = pipe.transformer
        self.decode_mode = decode
        self.max_sequence_length = max_sequence_length
        for module in (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3, pipe.vae):
            if module is not None:
                module.requires_grad_(False)
                module.eval()

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        dtype: torch.dtype = torch.float32,
        device: str | None = None,
        max_sequence_length: int | None = None,
        frozen_dtype: torch.dtype | None = None,
    ) -> SD3Family:
        """Load a diffusers SD3 folder or Hub id; ``r1vision_diffusion.json`` (tiny models) may set the
        decode mode (``vae`` or ``identity`` for pixel-space models) and the T5 length.

        ``dtype`` is the denoiser's; the frozen text encoders load in ``frozen_dtype`` (default: ``dtype``;
        bf16 saves SD3.5's T5-XXL 9.5 GB over fp32) and the VAE stays in fp32 (it decodes what is scored)."""
        from diffusers import StableDiffusion3Pipeline

        # each component loads in its own dtype (casting afterwards makes diffusers warn on every load)
        dtypes = {"transformer": dtype, "vae": torch.float32, "default": frozen_dtype or dtype}
        pipe = StableDiffusion3Pipeline.from_pretrained(path, dtype=dtypes)
        if device:
            pipe.to(device)
        marker = Path(path) / MARKER
        extra = json.loads(marker.read_text()) if marker.is_file() else {}
        length = max_sequence_length or int(extra.get("max_sequence_length", 128))
        return cls(pipe, decode=str(extra.get("decode", "vae")), max_sequence_length=length)

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    @property
    def channels(self) -> int:
        return int(self.transformer.config.in_channels)

    def latent_size(self, resolution: int) -> int:
        """Latent side for an image side of ``resolution`` pixels."""
        return resolution if self.decode_mode == "identity" else resolution // self.pipe.vae_scale_factor

    @torch.no_grad()
    def encode(self, prompts: list[str], guidance: bool) -> Conditioning:
        """Prompt embeddings for ``prompts`` (and the empty prompt's, for classifier-free guidance)."""
        embeds, neg, pooled, neg_pooled = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=guidance,
            negative_prompt=[""] * len(prompts) if guidance else None,
            max_sequence_length=self.max_sequence_length,
        )
        return Conditioning(embeds, pooled, neg if guidance else None, neg_pooled if guidance else None)

    def velocity(
        self,
        transformer: Any,
        x: torch.Tensor,
        sigma: float,
        cond: Conditioning,
        guidance_scale: float,
        detach_uncond: bool = True,
    ) -> torch.Tensor:
        """The guided velocity at noise level ``sigma``: ``v_u + w (v_c - v_u)`` from one batched forward
        (conditional and unconditional halves); the unconditional half carries no gradient by default
        (Flow-GRPO detaches it in training)."""
        dtype = next(transformer.parameters()).dtype
        t = torch.full((x.shape[0],), float(sigma) * 1000.0, device=x.device, dtype=dtype)
        if cond.neg_embeds is None or guidance_scale == 1.0:
            return transformer(
                hidden_states=x.to(dtype),
                timestep=t,
                encoder_hidden_states=cond.embeds.to(dtype),
                pooled_projections=cond.pooled.to(dtype),
                return_dict=False,
            )[0].float()
        both = torch.cat([x, x]).to(dtype)
        out = transformer(
            hidden_states=both,
            timestep=torch.cat([t, t]),
            encoder_hidden_states=torch.cat([cond.neg_embeds, cond.embeds]).to(dtype),
            pooled_projections=torch.cat([cond.neg_pooled, cond.pooled]).to(dtype),
            return_dict=False,
        )[0].float()
        uncond, conditional = out.chunk(2)
        if detach_uncond:
            uncond = uncond.detach()
        return uncond + guidance_scale * (conditional - uncond)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1], shape (batch, 3, H, W), float32; ``DECODE_CHUNK`` images at a time (a 512 px
        decode keeps ~0.5 GiB of fp32 maps per image: 32 at once would be a 16 GiB peak)."""
        if self.decode_mode == "identity":  # pixel-space model: the first 3 channels are RGB in [-1, 1]
            return (latents[:, :3].float() * 0.5 + 0.5).clamp(0, 1)
        vae = self.pipe.vae
        scaled = latents / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
        images = [
            vae.decode(chunk.to(vae.dtype), return_dict=False)[0].float()
            for chunk in scaled.split(DECODE_CHUNK)
        ]
        return (torch.cat(images) * 0.5 + 0.5).clamp(0, 1)

    def sigmas(self, steps: int) -> torch.Tensor:
        """The ``steps + 1`` noise levels of a ``steps``-step schedule (the scheduler's shift applied)."""
        from copy import deepcopy

        scheduler = deepcopy(self.pipe.scheduler)
        scheduler.set_timesteps(steps, device="cpu")
        return scheduler.sigmas.float().clone()


def load_family(path: str, **kwargs: Any) -> SD3Family:
    """The family of the pipeline at ``path`` (SD3/SD3.5 today)."""
    index = Path(path) / "model_index.json"
    if index.is_file():
        cls = json.loads(index.read_text()).get("_class_name", "")
        if "StableDiffusion3" not in cls:
            raise ValueError(
                f"{path}: a {cls} pipeline; r1vision's text-to-image GRPO supports SD3/SD3.5 so far"
            )
    return SD3Family.from_pretrained(path, **kwargs)


def to_pil(images: torch.Tensor) -> list[Any]:
    """(batch, 3, H, W) images in [0, 1] as PIL images."""
    from PIL import Image

    array = (images.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(a) for a in array]
