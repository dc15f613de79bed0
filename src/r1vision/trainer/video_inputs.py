"""Video rows through TRL's GRPO loop, which knows images only.

TRL 1.16 tokenizes conversational prompts with the processor's chat template, so a ``{"type": "video"}``
part holding a decoded :class:`~r1vision.vision.video.Clip` reaches the processor and ``generate`` as it
should. Its log-probability passes, however, forward image tensors alone: a video prompt would be scored
without its video. The helpers here keep each sample's video tensors next to its row (a per-sample list
survives TRL's shuffle and split of the generation batch) and add them to every forward call of the
model, chunk by chunk, through a forward pre-hook -- the narrowest place that sees each call's inputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from r1vision.vision.video import MixedVisionInputError, count_video_parts, fill_video_parts

__all__ = [
    "MixedVisionInputError",
    "VIDEO_FIELDS",
    "count_video_parts",
    "fill_video_parts",
    "forward_with_videos",
    "split_video_fields",
]

VIDEO_FIELDS = ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


def split_video_fields(fields: dict[str, Any], per_sample: Sequence[int]) -> list[dict[str, Any] | None]:
    """The processor's batched video tensors cut into one dict per sample (``None`` for a sample without
    videos), given how many videos each sample has."""
    grid = torch.as_tensor(fields["video_grid_thw"]).reshape(-1, 3)
    rows = grid.prod(dim=-1).tolist()
    pixels = fields["pixel_values_videos"]
    seconds = fields.get("second_per_grid_ts")
    out: list[dict[str, Any] | None] = []
    video, row = 0, 0
    for n in per_sample:
        if n == 0:
            out.append(None)
            continue
        n_rows = int(sum(rows[video : video + n]))
        item = {
            "pixel_values_videos": pixels[row : row + n_rows],
            "video_grid_thw": grid[video : video + n],
        }
        if seconds is not None:
            item["second_per_grid_ts"] = torch.as_tensor(seconds, dtype=torch.float32).reshape(-1)[
                video : video + n
            ]
        out.append(item)
        video, row = video + n, row + n_rows
    if video != len(rows) or row != pixels.shape[0]:
        raise ValueError(
            f"video tensors do not match the prompts: {len(rows)} videos / {pixels.shape[0]} patch rows for "
            f"{video} video parts / {row} rows"
        )
    return out


def _chunk_kwargs(
    chunk: Sequence[dict[str, Any] | None], input_ids: torch.Tensor, token_ids: dict[str, int]
) -> dict[str, Any]:
    present = [v for v in chunk if v is not None]
    device = input_ids.device
    kwargs: dict[str, Any] = {}
    if present:
        kwargs["pixel_values_videos"] = torch.cat([v["pixel_values_videos"] for v in present]).to(device)
        kwargs["video_grid_thw"] = torch.cat([v["video_grid_thw"] for v in present]).to(device)
        if all("second_per_grid_ts" in v for v in present):
            kwargs["second_per_grid_ts"] = torch.cat([v["second_per_grid_ts"] for v in present]).to(device)
    # Qwen-VL's rotary positions read the modality of each token from mm_token_type_ids (1 image, 2 video).
    mm = torch.zeros_like(input_ids)
    if token_ids.get("image") is not None:
        mm[input_ids == token_ids["image"]] = 1
    if token_ids.get("video") is not None:
        mm[input_ids == token_ids["video"]] = 2
    kwargs["mm_token_type_ids"] = mm
    return kwargs


@contextlib.contextmanager
def forward_with_videos(
    model: torch.nn.Module,
    per_sample: Sequence[dict[str, Any] | None],
    n_rows: int,
    batch_size: int | None,
    token_ids: dict[str, int],
) -> Iterator[None]:
    """While open, each call of ``model`` gets the video tensors of its chunk of ``per_sample``: TRL's
    log-probability pass calls the model once per ``batch_size`` rows, in order."""
    size = batch_size or n_rows
    chunks = iter([per_sample[s : s + size] for s in range(0, n_rows, size)])

    def hook(_module: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        chunk = next(chunks, None)
        if chunk is None:
            raise RuntimeError("the model was called more often than there are chunks of video rows")
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        kwargs.update(_chunk_kwargs(chunk, input_ids, token_ids))
        return args, kwargs

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
