"""Synthetic videos for the ``motion`` task: one shape crossing the frame; "which way does it move?".

Rows follow Video-R1's schema (``problem_id``, ``problem``, ``data_type``, ``problem_type``, ``options``,
``process``, ``solution``, ``path``, ``data_source``), so a Video-R1-style dataset loads through the same
code. Videos are MP4 files (PyAV, the ``video`` extra) or, with ``container="frames"``, folders of PNG
frames.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from r1vision.tasks.shapes import COLORS, draw_shape

DIRECTIONS = ("left", "right", "up", "down")
LETTERS = "ABCD"
_STEP = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}


def motion_frames(
    direction: str,
    color: str,
    shape: str,
    rng: random.Random,
    size: int,
    frames: int,
    travel: float = 1.0,
    background: tuple[int, int, int] | None = None,
    shape_size: float = 0.25,
) -> list[Image.Image]:
    """``frames`` frames of a ``shape`` moving towards ``direction`` on a ``size`` x ``size`` canvas.

    ``travel``: the fraction of the free span the shape covers (1.0: from one edge to the other; smaller,
    from a random start, so its position in one frame does not give the answer away). ``background``: one
    colour for every video (default: a random light colour per video). ``shape_size``: the shape's side
    as a fraction of the canvas side.
    """
    if not 0.0 < travel <= 1.0:
        raise ValueError(f"travel must be in (0, 1], got {travel}")
    if not 0.0 < shape_size < 1.0:
        raise ValueError(f"shape_size must be in (0, 1), got {shape_size}")
    side = round(size * shape_size)
    dx, dy = _STEP[direction]
    span = size - side
    across = rng.randint(0, span)  # position on the axis the shape does not move along
    distance = round(travel * span)
    start = rng.randint(0, span - distance) if distance < span else 0  # travel 1: no draw, as before
    light = tuple(rng.randint(225, 255) for _ in range(3))  # drawn either way: same rows for a seed
    background = tuple(background) if background else light
    out = []
    for t in range(frames):
        along = start + round(t * distance / max(frames - 1, 1))
        along = along if (dx or dy) > 0 else span - along
        x, y = (along, across) if dx else (across, along)
        img = Image.new("RGB", (size, size), background)
        draw_shape(ImageDraw.Draw(img), shape, (x, y, x + side - 1, y + side - 1), COLORS[color])
        out.append(img)
    return out


def write_video(frames: list[Image.Image], path: Path, fps: int, container: str) -> Path:
    """Write ``frames`` as an MP4 (``container="mp4"``) or a folder of PNGs (``"frames"``); return the path."""
    if container == "frames":
        path.mkdir(parents=True, exist_ok=True)
        for i, frame in enumerate(frames):
            frame.save(path / f"{i:04d}.png")
        return path
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height = frames[0].size
        stream.pix_fmt = "yuv444p"  # no chroma subsampling: colours survive the round trip
        stream.options = {"crf": "12", "preset": "ultrafast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.asarray(frame), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def synth_motion(
    out_dir: str | Path,
    n: int,
    seed: int = 0,
    split: str = "train",
    size: int = 56,
    frames: int = 8,
    fps: int = 4,
    container: str = "mp4",
    shuffle_options: bool = True,
    travel: float = 1.0,
    background: tuple[int, int, int] | None = None,
    shape_size: float = 0.25,
) -> Path:
    """Write ``n`` rows to ``out_dir/{split}.jsonl`` with videos under ``out_dir/videos/``; return the jsonl.

    The options are the four directions in a shuffled order, so the answer letter varies (with
    ``shuffle_options=False`` always ``A. left, B. right, C. up, D. down``: the letter names the direction).
    ``travel`` < 1 moves the shape part of the way (small steps between frames), ``background`` fixes the
    background colour and ``shape_size`` sets the shape's size (see :func:`motion_frames`).
    Deterministic for a seed (the MP4 bytes depend on the encoder build; the decoded content does not).
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if container not in ("mp4", "frames"):
        raise ValueError(f"container must be 'mp4' or 'frames', got {container!r}")
    rng = random.Random(f"motion-{seed}-{split}")
    out = Path(out_dir)
    (out / "videos").mkdir(parents=True, exist_ok=True)
    path = out / f"{split}.jsonl"
    with path.open("w") as f:
        for i in range(n):
            direction = rng.choice(DIRECTIONS)
            color = rng.choice(sorted(COLORS))
            shape = rng.choice(("circle", "square"))
            order = rng.sample(DIRECTIONS, len(DIRECTIONS)) if shuffle_options else list(DIRECTIONS)
            letter = LETTERS[order.index(direction)]
            rel = f"videos/{split}_{i:05d}" + (".mp4" if container == "mp4" else "")
            frames_ = motion_frames(
                direction, color, shape, rng, size, frames, travel, background, shape_size
            )
            write_video(frames_, out / rel, fps, container)
            row = {
                "problem_id": i,
                "problem": f"In which direction does the {color} {shape} move?",
                "data_type": "video",
                "problem_type": "multiple choice",
                "options": [f"{LETTERS[k]}. {d}" for k, d in enumerate(order)],
                "process": f"<think>The {shape} starts on one side and ends on the other: it moves {direction}.</think>",
                "solution": f"<answer>{letter}</answer>",
                "path": rel,
                "data_source": "r1vision-motion",
                "direction": direction,
            }
            f.write(json.dumps(row) + "\n")
    return path
