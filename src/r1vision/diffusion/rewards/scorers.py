"""Model-based image rewards that load their weights from a local path the user gives (never downloaded).

- :class:`CLIPScore`: cosine similarity of a CLIP model's image and text embeddings, ``max(cos, 0)``.
- :func:`pickscore`: PickScore (a CLIP fine-tuned on human preferences): ``exp(logit_scale) * cos / 26``,
  Flow-GRPO's normalisation, from a local copy of ``yuvalkirstain/PickScore_v1`` (with the processor of
  ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K`` in the same or another local folder).
- :class:`AestheticScore`: the LAION aesthetic predictor (an MLP on normalised CLIP ViT-L/14 image
  embeddings) from a local weights file, score / 10.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def _local(path: str | Path, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what}: no such local path {p} (model-based rewards never download)")
    return p


class CLIPScore:
    """``f(prompts, images) -> cos(image, prompt)`` clipped at 0, with the CLIP model at ``path``."""

    def __init__(
        self,
        path: str | Path,
        processor_path: str | Path | None = None,
        device: str = "cpu",
        scale: str = "cosine",
    ) -> None:
        from transformers import AutoTokenizer, CLIPImageProcessor, CLIPModel

        model_dir = _local(path, "CLIP model")
        proc_dir = _local(processor_path or path, "CLIP processor")
        self.model = CLIPModel.from_pretrained(model_dir, local_files_only=True).to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(proc_dir, local_files_only=True)
        self.images = CLIPImageProcessor.from_pretrained(proc_dir, local_files_only=True)
        self.device, self.scale = device, scale
        self.__name__ = "pickscore" if scale == "pickscore" else "clip_score"

    @torch.no_grad()
    def cosine(self, prompts: Sequence[str], images: Sequence[Any]) -> torch.Tensor:
        pixels = self.images(images=list(images), return_tensors="pt")["pixel_values"].to(self.device)
        text = self.tokenizer(list(prompts), padding=True, truncation=True, return_tensors="pt").to(
            self.device
        )
        image_embeds = self.model.get_image_features(pixel_values=pixels)
        text_embeds = self.model.get_text_features(**text)
        image_embeds = getattr(image_embeds, "pooler_output", image_embeds)
        text_embeds = getattr(text_embeds, "pooler_output", text_embeds)
        image_embeds = image_embeds / image_embeds.norm(dim=-1, keepdim=True)
        text_embeds = text_embeds / text_embeds.norm(dim=-1, keepdim=True)
        return (image_embeds * text_embeds).sum(dim=-1).float().cpu()

    def __call__(self, prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float]:
        cos = self.cosine(prompts, images)
        if self.scale == "pickscore":
            return (self.model.logit_scale.exp().cpu() * cos / 26.0).tolist()
        return cos.clamp(min=0.0).tolist()


def pickscore(path: str | Path, processor_path: str | Path | None = None, device: str = "cpu") -> CLIPScore:
    """PickScore from local folders (see the module docstring)."""
    return CLIPScore(path, processor_path, device=device, scale="pickscore")


class AestheticScore:
    """LAION's aesthetic predictor on CLIP image embeddings (``clip_path``: a local CLIP ViT-L/14, ``weights``:
    the MLP's state dict, ``.pth`` or ``.safetensors``); reward = predicted score / 10."""

    def __init__(self, clip_path: str | Path, weights: str | Path, device: str = "cpu") -> None:
        clip = CLIPScore(clip_path, device=device)
        self.model, self.images, self.device = clip.model, clip.images, device
        dim = int(self.model.config.projection_dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 1024),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(1024, 128),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(128, 64),
            torch.nn.Dropout(0.1),
            torch.nn.Linear(64, 16),
            torch.nn.Linear(16, 1),
        )
        file = _local(weights, "aesthetic predictor weights")
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(file))
        else:
            state = torch.load(file, map_location="cpu", weights_only=True)
        state = {k.removeprefix("layers."): v for k, v in state.items()}
        self.mlp.load_state_dict(state)
        self.mlp.to(device).eval()
        self.__name__ = "aesthetic"

    @torch.no_grad()
    def __call__(self, prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float]:
        pixels = self.images(images=list(images), return_tensors="pt")["pixel_values"].to(self.device)
        embeds = self.model.get_image_features(pixel_values=pixels)
        embeds = getattr(embeds, "pooler_output", embeds)
        embeds = embeds / embeds.norm(dim=-1, keepdim=True)
        return (self.mlp(embeds.float()).squeeze(-1) / 10.0).cpu().tolist()
