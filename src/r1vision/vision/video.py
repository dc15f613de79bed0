"""Videos for the Qwen-VL families: decoding, frame sampling under one budget, and a torchvision-free
video processor.

Qwen-VL cuts a video like an image, with one more axis: frames are resized to a multiple of
``patch_size * merge_size``, padded to a multiple of ``temporal_patch_size`` (2) by repeating the last
frame, and every ``2 x patch x patch`` cube becomes one patch row. transformers' own video processors
need torchvision (no CPU build matches torch 2.13), so :class:`~r1vision.vision.video_processor.QwenVideoProcessor` does the same cut
with torch alone. Decoding uses PyAV (the ``video`` extra): it reads the container's frame rate and
frame count, which the frame sampler needs.

The sampling rule is qwen-vl-utils' (what Qwen-VL was trained with): ``fps`` frames per second of
video, clamped to ``[min_frames, max_frames]``, an even count, evenly spaced; each frame's area is at
most ``max_frame_pixels`` and, with ``total_pixels`` set, the clip's frames share that total.
"""

from __future__ import annotations

import io
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from r1vision.vision.budget import resized_size
from r1vision.vision.family import FAMILIES
from r1vision.vision.images import count_parts, describe_source, load_image, resolve_path

__all__ = [
    "Clip",
    "MixedVisionInputError",
    "count_video_parts",
    "fill_video_parts",
    "VideoBudget",
    "VideoLoadError",
    "load_clip",
    "sample_indices",
    "video_tokens",
    "videos_of_row",
]

FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


class VideoLoadError(ValueError):
    """A video could not be loaded; the message names the source."""


@dataclass(frozen=True)
class VideoBudget:
    """How many frames a video becomes and how large each frame is, for training, vLLM and ``infer``.

    Defaults follow Video-R1's training setting (16 frames of at most 128 tokens each) and
    qwen-vl-utils' sampling rate (2 frames per second, at least 4 frames).
    """

    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 16
    min_frame_pixels: int = 4 * 28 * 28
    max_frame_pixels: int = 128 * 28 * 28
    total_pixels: int | None = None
    factor: int = 28
    temporal_patch_size: int = 2

    def __post_init__(self) -> None:
        if self.fps <= 0:
            raise ValueError(f"video fps must be positive, got {self.fps}")
        if not 1 <= self.min_frames <= self.max_frames:
            raise ValueError(
                f"need 1 <= video_min_frames <= video_max_frames, got {self.min_frames}, {self.max_frames}"
            )
        if self.max_frame_pixels < max(self.min_frame_pixels, self.factor * self.factor):
            raise ValueError(
                f"video_max_frame_pixels={self.max_frame_pixels} is below one frame's minimum "
                f"({max(self.min_frame_pixels, self.factor * self.factor)})"
            )

    @classmethod
    def for_family(cls, family: str, **overrides: Any) -> VideoBudget:
        """The family's factor (28 or 32) with the given fields; ``None`` values keep the defaults."""
        factor = FAMILIES[family].factor if family in FAMILIES else 28
        # The defaults count tokens (4 and 128 per frame): the same counts at the family's token size.
        base = cls(
            factor=factor, min_frame_pixels=4 * factor * factor, max_frame_pixels=128 * factor * factor
        )
        fields = {k: v for k, v in overrides.items() if v is not None}
        if "max_frames" in fields and "min_frames" not in fields:  # a small cap lowers the floor
            fields["min_frames"] = min(base.min_frames, fields["max_frames"])
        if "max_frame_pixels" in fields and "min_frame_pixels" not in fields:
            fields["min_frame_pixels"] = min(
                base.min_frame_pixels, max(factor * factor, fields["max_frame_pixels"])
            )
        return cls(**{**base.__dict__, **fields}) if fields else base

    def frame_size(self, width: int, height: int, num_frames: int) -> tuple[int, int]:
        """(width, height) each of ``num_frames`` frames of this size is resized to."""
        max_pixels = self.max_frame_pixels
        if self.total_pixels is not None:
            share = self.total_pixels / max(num_frames, 1) * self.temporal_patch_size
            max_pixels = max(min(max_pixels, int(share)), int(self.min_frame_pixels * 1.05))
        return resized_size(width, height, self.min_frame_pixels, max_pixels, self.factor)

    def num_tokens(self, width: int, height: int, num_frames: int) -> int:
        """Video placeholder tokens for ``num_frames`` sampled frames of this original size."""
        w, h = self.frame_size(width, height, num_frames)
        steps = math.ceil(num_frames / self.temporal_patch_size)
        return steps * (w // self.factor) * (h // self.factor)


def sample_indices(total_frames: int, video_fps: float, budget: VideoBudget) -> list[int]:
    """Indices of the frames kept from a video of ``total_frames`` frames at ``video_fps``."""
    if total_frames < 1:
        raise VideoLoadError("the video has no frames")
    if total_frames < budget.temporal_patch_size:
        return list(range(total_frames))
    step = budget.temporal_patch_size
    wanted = total_frames / video_fps * budget.fps
    lowest = math.ceil(budget.min_frames / step) * step
    highest = max(step, (min(budget.max_frames, total_frames) // step) * step)
    n = min(max(wanted, lowest), highest, total_frames)
    n = max(step, int(n // step) * step)
    return [int(i) for i in np.linspace(0, total_frames - 1, n).round()]


class Clip(np.ndarray):
    """Sampled, resized frames ``(T, H, W, 3)`` uint8, with where they came from: the source's frame
    rate ``fps``, its ``total_num_frames`` and the kept ``frames_indices`` (Qwen2.5-VL's temporal
    positions and Qwen3-VL's timestamps are computed from them)."""

    fps: float | None
    total_num_frames: int
    frames_indices: list[int]
    original_size: tuple[int, int]

    def __new__(
        cls,
        frames: np.ndarray,
        fps: float | None,
        total_num_frames: int,
        frames_indices: Sequence[int],
        original_size: tuple[int, int],
    ) -> Clip:
        obj = np.ascontiguousarray(frames, dtype=np.uint8).view(cls)
        obj.fps = fps
        obj.total_num_frames = total_num_frames
        obj.frames_indices = list(frames_indices)
        obj.original_size = original_size
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        if obj is None:
            return
        self.fps = getattr(obj, "fps", None)
        self.total_num_frames = getattr(obj, "total_num_frames", 0)
        self.frames_indices = list(getattr(obj, "frames_indices", []))
        self.original_size = getattr(obj, "original_size", (0, 0))

    def __reduce__(self):  # keep the metadata through pickling (dataloader workers, multiprocessing)
        state = super().__reduce__()
        extra = (self.fps, self.total_num_frames, self.frames_indices, self.original_size)
        return (state[0], state[1], (*state[2], extra))

    def __setstate__(self, state: Any) -> None:
        *base, extra = state
        super().__setstate__(tuple(base))
        self.fps, self.total_num_frames, self.frames_indices, self.original_size = extra

    @property
    def frame_size(self) -> tuple[int, int]:
        """(width, height) of the frames, as PIL reports image sizes."""
        return int(self.shape[2]), int(self.shape[1])


def describe_video(value: Any) -> str:
    """Short description of a video value for error messages."""
    return f"<{len(value)} frames>" if isinstance(value, (list, tuple)) else describe_source(value)


def load_clip(
    value: Any, budget: VideoBudget, root: str | os.PathLike | None = None, fps: float | None = None
) -> Clip:
    """Decode, sample and resize a video given as a file (any container PyAV reads), a folder of frame
    images, a list of frames (paths, PIL images, bytes), ``{"path"|"bytes": ...}`` (the Hub ``Video``
    feature undecoded) or a ``(T, H, W, 3)`` array. ``fps`` is the frame rate of frame lists and folders
    (default: ``budget.fps``, so every frame up to ``max_frames`` is kept). Raises :class:`VideoLoadError`."""
    try:
        if isinstance(value, Clip):
            return value
        if isinstance(value, dict) and value.get("bytes"):
            return _decode_container(io.BytesIO(value["bytes"]), budget, describe_video(value))
        if isinstance(value, dict) and value.get("path"):
            return load_clip(value["path"], budget, root, fps)
        if isinstance(value, (str, os.PathLike)):
            path = resolve_path(value, root)
            if path.is_dir():
                frames = _frame_files(path)
                if not frames:
                    raise VideoLoadError(
                        f"video folder {path} holds no frame images ({', '.join(FRAME_SUFFIXES)})"
                    )
                return _from_frames(frames, budget, fps, root=None)
            if not path.is_file():
                raise VideoLoadError(f"video file not found: {path}")
            return _CLIPS.load(path, budget)
        if isinstance(value, np.ndarray) and value.ndim == 4:
            return _from_frames(list(value), budget, fps, root)
        if isinstance(value, (list, tuple)) and value:
            return _from_frames(list(value), budget, fps, root)
        raise VideoLoadError(f"unsupported video value of type {type(value).__name__}")
    except VideoLoadError:
        raise
    except Exception as exc:  # decoders raise many types for corrupt data
        raise VideoLoadError(f"cannot decode video {describe_video(value)}: {exc}") from exc


def video_tokens(
    value: Any, budget: VideoBudget, root: str | os.PathLike | None = None, fps: float | None = None
) -> tuple[int, tuple[int, int]]:
    """(placeholder tokens, original (width, height)) of a video as :func:`load_clip` would give it, read
    from the container's header or the first frame: nothing is decoded unless the header lacks the length."""
    try:
        if isinstance(value, Clip):
            return budget.num_tokens(*value.original_size, len(value)), value.original_size
        path = value.get("path") if isinstance(value, dict) and not value.get("bytes") else value
        if isinstance(path, (str, os.PathLike)) and resolve_path(path, root).is_file():
            import av

            with av.open(str(resolve_path(path, root))) as container:
                stream = container.streams.video[0]
                total = int(stream.frames or 0)
                rate = float(stream.average_rate or stream.guessed_rate or budget.fps)
                size = (stream.codec_context.width, stream.codec_context.height)
            if total > 0 and min(size) > 0:
                kept = len(sample_indices(total, rate, budget))
                return budget.num_tokens(*size, kept), size
        elif isinstance(path, (str, os.PathLike)) and resolve_path(path, root).is_dir():
            frames = _frame_files(resolve_path(path, root))
            if frames:
                size = load_image(frames[0]).size
                kept = len(sample_indices(len(frames), fps or budget.fps, budget))
                return budget.num_tokens(*size, kept), size
        elif isinstance(value, (list, tuple, np.ndarray)) and len(value):
            size = _frame_image(value[0], root).size
            kept = len(sample_indices(len(value), fps or budget.fps, budget))
            return budget.num_tokens(*size, kept), size
    except VideoLoadError:
        raise
    except Exception:  # an unreadable header: the full decode below names the problem
        pass
    clip = load_clip(value, budget, root, fps)
    return budget.num_tokens(*clip.original_size, len(clip)), clip.original_size


def _frame_files(folder: Path) -> list[Path]:
    """The frame images of a video folder, in name order."""
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES)


def _from_frames(frames: list[Any], budget: VideoBudget, fps: float | None, root: Any) -> Clip:
    rate = fps or budget.fps
    keep = sample_indices(len(frames), rate, budget)
    images = [_frame_image(frames[i], root) for i in keep]
    return _resize(images, rate, len(frames), keep, budget)


def _frame_image(value: Any, root: Any) -> Image.Image:
    if isinstance(value, np.ndarray):
        return Image.fromarray(np.asarray(value, dtype=np.uint8)).convert("RGB")
    return load_image(value, root)


def _decode_container(source: Any, budget: VideoBudget, name: str, known_total: int | None = None) -> Clip:
    try:
        import av
    except ImportError as exc:
        raise VideoLoadError(
            f"decoding {name} needs PyAV: pip install 'r1vision[video]' (or give the frames as image files)"
        ) from exc
    with av.open(source) as container:
        if not container.streams.video:
            raise VideoLoadError(f"{name} has no video stream")
        stream = container.streams.video[0]
        rate = float(stream.average_rate or stream.guessed_rate or budget.fps)
        total = known_total or int(stream.frames or 0)
        if total <= 0:  # the container does not know its length: decode it all (short clips)
            frames = [frame.to_image().convert("RGB") for frame in container.decode(stream)]
            keep = sample_indices(len(frames), rate, budget)
            return _resize([frames[i] for i in keep], rate, len(frames), keep, budget)
        # Keep only the sampled frames while decoding: a long video never sits in memory whole.
        keep = sample_indices(total, rate, budget)
        wanted = set(keep)
        images, seen = [], 0
        for frame in container.decode(stream):
            if seen in wanted:
                images.append(frame.to_image().convert("RGB"))
            seen += 1
            if len(images) == len(wanted):
                break
    if len(images) == len(wanted):
        return _resize(images, rate, total, keep, budget)
    if known_total is not None or seen == 0:
        raise VideoLoadError(f"{name}: the video stream decodes to {seen} frames")
    # The header overstated the length: decode again with the counted length.
    if isinstance(source, io.BytesIO):
        source.seek(0)
    return _decode_container(source, budget, name, known_total=seen)


class _ClipCache:
    """The most recently decoded video files' clips, up to ``max_bytes`` of frames per process.

    Why: SFT and GRPO read every clip once per epoch and a demo-sized set fits many times over (the quick
    motion demo decoded each of its 1,024 MP4s ~10 times: a quarter of its SFT time). Keyed by the file's
    path, size and modification time and by the budget, so a rewritten file or another budget decodes
    anew; a caller gets its own copy, never the cached frames."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._clips: OrderedDict[tuple, Clip] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # a loader thread and the trainer may read clips at once

    def load(self, path: Path, budget: VideoBudget) -> Clip:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns, budget)
        with self._lock:
            clip = self._clips.get(key)
            if clip is not None:
                self._clips.move_to_end(key)
                return clip.copy()
        clip = _decode_container(str(path), budget, str(path))
        with self._lock:
            if clip.nbytes <= self.max_bytes and key not in self._clips:
                self._clips[key] = clip
                self._bytes += clip.nbytes
                while self._bytes > self.max_bytes:
                    self._bytes -= self._clips.popitem(last=False)[1].nbytes
        return clip.copy()


# 256 MiB: ~16,000 demo clips (2 frames of 56 px), ~650 Video-R1 clips (16 frames of 128 tokens).
_CLIPS = _ClipCache(256 << 20)


def _resize(images: list[Image.Image], fps: float, total: int, keep: list[int], budget: VideoBudget) -> Clip:
    width, height = images[0].size
    size = budget.frame_size(width, height, len(images))
    frames = np.stack(
        [
            np.asarray(img if img.size == size else img.resize(size, Image.Resampling.BICUBIC))
            for img in images
        ]
    )
    return Clip(frames, fps, total, keep, (width, height))


def videos_of_row(row: dict[str, Any]) -> list[Any]:
    """The raw video values of a row: the ``videos`` list, or ``[video]``; empty if neither. A ``path``
    column counts as the video in Video-R1's schema (``data_type == "video"``)."""
    if row.get("videos") is not None:
        value = row["videos"]
        return list(value) if isinstance(value, (list, tuple)) else [value]
    if row.get("video") is not None:
        return [row["video"]]
    if row.get("data_type") == "video" and row.get("path"):
        return [row["path"]]
    return []


class MixedVisionInputError(ValueError):
    """Images and videos in one batch, or videos where they cannot be used; the message says what to do."""


def count_video_parts(prompt: Any) -> int:
    """Number of ``{"type": "video"}`` parts in a conversational prompt."""
    return count_parts(prompt, "video")


def clips_of_prompt(prompt: Any) -> list[Any]:
    """The videos :func:`fill_video_parts` placed in a conversational prompt, in order."""
    if isinstance(prompt, str):
        return []
    return [
        part["video"]
        for message in prompt
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "video" and part.get("video") is not None
    ]


def fill_video_parts(prompt: Any, clips: Sequence[Clip], label: str) -> list[dict[str, Any]]:
    """``prompt`` with its ``{"type": "video"}`` parts holding ``clips`` in order; a prompt without video
    parts gets them at the start of its first user message (as TRL places images). The counts must agree."""
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    parts = count_video_parts(prompt)
    if parts and parts != len(clips):
        raise MixedVisionInputError(
            f"{label}: the prompt has {parts} video part(s) but the row has {len(clips)} video(s)"
        )
    queue = iter(clips)
    out, placed = [], bool(parts)
    for message in prompt:
        content = message.get("content")
        if parts and isinstance(content, list):
            content = [
                {"type": "video", "video": next(queue)} if part.get("type") == "video" else part
                for part in content
            ]
        elif not placed and message.get("role") == "user":
            text = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            content = [{"type": "video", "video": c} for c in clips] + text
            placed = True
        out.append({**message, "content": content})
    return out
