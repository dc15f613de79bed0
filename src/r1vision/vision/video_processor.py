"""A torchvision-free Qwen-VL video processor: the patch rows transformers' video processors compute.

Qwen-VL cuts a video like an image, with one more axis: frames at a multiple of ``patch_size *
merge_size``, padded to a multiple of ``temporal_patch_size`` (2) with the last frame, every
``2 x patch x patch`` cube one patch row. transformers' own video processors need torchvision (no CPU build
matches torch 2.13); this one uses torch alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from r1vision.vision.budget import resized_size
from r1vision.vision.video import Clip, VideoBudget

__all__ = ["QwenVideoProcessor", "video_budget_from_args"]


class QwenVideoProcessor:
    """What transformers' Qwen-VL video processors compute (``pixel_values_videos``, ``video_grid_thw``,
    ``video_metadata``), with torch alone. Frames already at a multiple of ``patch_size * merge_size``
    (what :func:`load_clip` returns) are used as they are; others are resized to the processor's
    per-frame budget first."""

    model_input_names = ["pixel_values_videos", "video_grid_thw"]
    # What vLLM's Qwen-VL code reads for its dummy inputs and timestamps (transformers' Qwen3-VL defaults).
    # r1vision samples frames itself (load_clip), so the processor never does.
    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 768
    do_sample_frames: bool = False

    def __init__(
        self,
        patch_size: int = 14,
        temporal_patch_size: int = 2,
        merge_size: int = 2,
        image_mean: Sequence[float] = (0.48145466, 0.4578275, 0.40821073),
        image_std: Sequence[float] = (0.26862954, 0.26130258, 0.27577711),
        rescale_factor: float = 1 / 255,
        min_pixels: int = 4 * 28 * 28,
        max_pixels: int = 128 * 28 * 28,
    ) -> None:
        self.patch_size = patch_size
        self.temporal_patch_size = temporal_patch_size
        self.merge_size = merge_size
        self.image_mean = list(image_mean)
        self.image_std = list(image_std)
        self.rescale_factor = rescale_factor
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        self.size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}

    @classmethod
    def from_image_processor(cls, image_processor: Any) -> QwenVideoProcessor:
        """The video processor matching a Qwen-VL image processor (same patching and normalisation)."""
        factor = image_processor.patch_size * image_processor.merge_size
        return cls(
            patch_size=image_processor.patch_size,
            temporal_patch_size=image_processor.temporal_patch_size,
            merge_size=image_processor.merge_size,
            image_mean=image_processor.image_mean,
            image_std=image_processor.image_std,
            rescale_factor=getattr(image_processor, "rescale_factor", 1 / 255),
            min_pixels=4 * factor * factor,
            max_pixels=128 * factor * factor,
        )

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def __call__(
        self,
        videos: Any,
        return_metadata: bool = False,
        return_tensors: Any = None,
        video_metadata: Any = None,
        fps: float | Sequence[float] | None = None,
        do_rescale: bool = True,
        do_normalize: bool = True,
        **_: Any,
    ) -> Any:
        """Patch rows of every video in ``videos`` (nested lists of clips / frame lists / 4-D arrays).

        ``video_metadata`` (one per video, nested like ``videos``: what vLLM passes Qwen3-VL with plain
        arrays) gives the frame rate and sampled indices a :class:`Clip` would carry; without it, ``fps``
        (one, or one per video: what vLLM passes Qwen2/2.5-VL) is the rate of the frames as given.
        ``do_rescale`` / ``do_normalize`` off leave that step to the model (vLLM normalises Qwen2/2.5-VL
        inputs on the device and asks the processor for raw pixel values)."""
        import torch
        from transformers.feature_extraction_utils import BatchFeature
        from transformers.video_utils import VideoMetadata

        flat = _flatten_videos(videos)
        given = _flatten_metadata(video_metadata)
        if given and len(given) != len(flat):
            raise ValueError(f"{len(flat)} videos but {len(given)} video_metadata entries")
        if not given and fps is not None:
            rates = [float(fps)] * len(flat) if isinstance(fps, (int, float)) else [float(r) for r in fps]
            given = [{"fps": r} for r in rates]
            if len(given) != len(flat):
                raise ValueError(f"{len(flat)} videos but {len(given)} fps values")
        clips = [self._as_clip(v, given[i] if given else None) for i, v in enumerate(flat)]
        rows, grids, metadata = [], [], []
        for clip in clips:
            patches, grid = self.patchify(clip, do_rescale=do_rescale, do_normalize=do_normalize)
            rows.append(patches)
            grids.append(grid)
            metadata.append(
                VideoMetadata(
                    total_num_frames=clip.total_num_frames,
                    fps=clip.fps,
                    width=clip.original_size[0],
                    height=clip.original_size[1],
                    frames_indices=list(clip.frames_indices),
                )
            )
        data: dict[str, Any] = {
            "pixel_values_videos": torch.cat(rows) if rows else torch.zeros(0),
            "video_grid_thw": torch.tensor(grids, dtype=torch.long),
        }
        if return_metadata:
            data["video_metadata"] = metadata
        return BatchFeature(data)

    def _as_clip(self, value: Any, metadata: Any = None) -> Clip:
        if isinstance(value, Clip):
            clip = value
        elif metadata is not None:  # a plain array with its metadata (vLLM's video items)
            frames = np.asarray(value)
            indices = _meta(metadata, "frames_indices") or range(len(frames))
            width, height = _meta(metadata, "width"), _meta(metadata, "height")
            clip = Clip(
                frames,
                _meta(metadata, "fps"),
                int(_meta(metadata, "total_num_frames") or len(frames)),
                list(indices),
                (int(width), int(height)) if width and height else (frames.shape[2], frames.shape[1]),
            )
        else:
            frames = [
                np.asarray(f.convert("RGB")) if isinstance(f, Image.Image) else np.asarray(f) for f in value
            ]
            clip = Clip(
                np.stack(frames),
                None,
                len(frames),
                range(len(frames)),
                (frames[0].shape[1], frames[0].shape[0]),
            )
        h, w = clip.shape[1:3]
        if h % self.factor or w % self.factor:
            size = resized_size(w, h, self.min_pixels, self.max_pixels, self.factor)
            frames = np.stack(
                [np.asarray(Image.fromarray(f).resize(size, Image.Resampling.BICUBIC)) for f in clip]
            )
            clip = Clip(frames, clip.fps, clip.total_num_frames, clip.frames_indices, clip.original_size)
        return clip

    def patchify(
        self, clip: np.ndarray, do_rescale: bool = True, do_normalize: bool = True
    ) -> tuple[Any, list[int]]:
        """``(T, H, W, 3)`` uint8 frames → patch rows ``(t*h*w, 3*tp*p*p)`` and the grid ``[t, h, w]``.

        Row order is Qwen-VL's: time step, then 2x2 merge windows in raster order, then the patches
        inside a window; each row is channel, time, patch row, patch column."""
        import torch

        tp, p, m = self.temporal_patch_size, self.patch_size, self.merge_size
        x = torch.from_numpy(np.asarray(clip)).permute(0, 3, 1, 2).to(torch.float32)
        if do_rescale:
            x = x * self.rescale_factor
        if do_normalize:
            mean = torch.tensor(self.image_mean).view(1, 3, 1, 1)
            std = torch.tensor(self.image_std).view(1, 3, 1, 1)
            x = (x - mean) / std
        if x.shape[0] % tp:  # pad with copies of the last frame, as Qwen-VL does
            x = torch.cat([x, x[-1:].expand(tp - x.shape[0] % tp, -1, -1, -1)])
        t, c, h, w = x.shape
        gt, gh, gw = t // tp, h // p, w // p
        x = x.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p)
        x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
        return x.reshape(gt * gh * gw, c * tp * p * p).contiguous(), [gt, gh, gw]

    def get_num_of_video_patches(
        self, num_frames: int, height: int, width: int, videos_kwargs: Any = None
    ) -> int:
        """Patch rows of a video of ``num_frames`` frames of ``height x width`` (after our resize)."""
        w, h = resized_size(width, height, self.min_pixels, self.max_pixels, self.factor)
        return (
            math.ceil(num_frames / self.temporal_patch_size) * (h // self.patch_size) * (w // self.patch_size)
        )


def _flatten_videos(videos: Any) -> list[Any]:
    """Every video in a nested list; a video is a 4-D array or a list of frames (PIL images / 3-D arrays)."""
    if isinstance(videos, np.ndarray) and videos.ndim == 4:
        return [videos]
    if isinstance(videos, (list, tuple)):
        if videos and (
            isinstance(videos[0], Image.Image) or (isinstance(videos[0], np.ndarray) and videos[0].ndim == 3)
        ):
            return [list(videos)]
        out: list[Any] = []
        for item in videos:
            out.extend(_flatten_videos(item))
        return out
    if videos is None:
        return []
    raise TypeError(
        f"unsupported video input of type {type(videos).__name__}; decode it with r1vision.vision.video.load_clip"
    )


def _flatten_metadata(metadata: Any) -> list[Any]:
    """Every entry of a (possibly nested) list of video metadata (dicts or ``VideoMetadata``)."""
    if metadata is None:
        return []
    if isinstance(metadata, (list, tuple)):
        out: list[Any] = []
        for item in metadata:
            out.extend(_flatten_metadata(item))
        return out
    return [metadata]


def _meta(metadata: Any, key: str) -> Any:
    return metadata.get(key) if isinstance(metadata, dict) else getattr(metadata, key, None)


def video_budget_from_args(family: str, args: Any, processor: Any = None) -> VideoBudget:
    """The run's video budget from its ``video_*`` options (absent or ``None``: the defaults); the
    processor's video processor is given the same per-frame bounds, so its own resize is a no-op."""
    budget = VideoBudget.for_family(
        family,
        fps=getattr(args, "video_fps", None),
        min_frames=getattr(args, "video_min_frames", None),
        max_frames=getattr(args, "video_max_frames", None),
        max_frame_pixels=getattr(args, "video_max_frame_pixels", None),
        total_pixels=getattr(args, "video_total_pixels", None),
    )
    video_processor = getattr(processor, "video_processor", None)
    if isinstance(video_processor, QwenVideoProcessor):
        video_processor.min_pixels = budget.min_frame_pixels
        video_processor.max_pixels = budget.max_frame_pixels
        video_processor.size = {
            "shortest_edge": budget.min_frame_pixels,
            "longest_edge": budget.max_frame_pixels,
        }
    return budget
