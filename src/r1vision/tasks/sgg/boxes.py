"""One box convention per model family, shared by SFT targets, rewards, inference and evaluation.

Datasets store boxes ``[x1, y1, x2, y2]`` in *original-image pixels*. The model reads and writes boxes in
its family's frame (``FAMILY_BOX_FRAME`` in :mod:`r1vision.vision.family`):

- ``norm1000`` (Qwen2-VL, Qwen3-VL): coordinates scaled to 0-1000 on both axes;
- ``pixels`` (Qwen2.5-VL): absolute pixels of the *resized* image the model saw (pixel-budget resize).

:class:`BoxFrame` converts between the two; everything that compares boxes does it in the model frame,
with ground truth converted by the very function that writes SFT targets, so a perfect answer scores the
maximum exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from r1vision.vision.budget import PixelBudget
from r1vision.vision.family import FAMILY_BOX_FRAME

Box = Sequence[float]


@dataclass(frozen=True)
class BoxFrame:
    """Coordinate frame of one image for one model family.

    ``width``/``height`` are the extent of the model frame (1000x1000, or the resized image size);
    ``orig_width``/``orig_height`` the original image size the dataset boxes refer to.
    """

    kind: str
    width: float
    height: float
    orig_width: float
    orig_height: float

    @property
    def sx(self) -> float:
        return self.width / self.orig_width

    @property
    def sy(self) -> float:
        return self.height / self.orig_height

    def to_model(self, box: Box) -> list[int]:
        """Original-pixel box -> integer model-frame box (the SFT target), clipped to the frame."""
        x1, y1, x2, y2 = (float(v) for v in box)
        out = [round(x1 * self.sx), round(y1 * self.sy), round(x2 * self.sx), round(y2 * self.sy)]
        return [int(min(max(v, 0), lim)) for v, lim in zip(out, (self.width, self.height) * 2, strict=False)]

    def to_original(self, box: Box) -> list[float]:
        """Model-frame box -> original-pixel box (for evaluation against dataset boxes)."""
        x1, y1, x2, y2 = (float(v) for v in box)
        return [x1 / self.sx, y1 / self.sy, x2 / self.sx, y2 / self.sy]

    def clip(self, box: Box) -> list[float]:
        """Clip a model-frame box to the frame (models sometimes overshoot the border)."""
        x1, y1, x2, y2 = (float(v) for v in box)
        return [min(max(x1, 0.0), self.width), min(max(y1, 0.0), self.height)] + [
            min(max(x2, 0.0), self.width),
            min(max(y2, 0.0), self.height),
        ]

    def normalize(self, box: Box) -> list[float]:
        """Model-frame box -> [0, 1] coordinates (for L1 terms that do not depend on the frame's scale)."""
        x1, y1, x2, y2 = (float(v) for v in box)
        return [x1 / self.width, y1 / self.height, x2 / self.width, y2 / self.height]


def box_frame(
    family: str,
    original_size: Sequence[float],
    resized_size: Sequence[float] | None = None,
    budget: PixelBudget | None = None,
) -> BoxFrame:
    """The model frame of ``family`` for an image of ``original_size`` (width, height).

    For pixel-frame families the resized size is ``resized_size`` when given (what the trainer measured),
    else what ``budget`` resizes the image to (callers pass the budget the runner resolved once with the
    model's processor, so targets, rewards and evaluation share the model's frame; ``None``: the family's
    default budget).
    """
    if family not in FAMILY_BOX_FRAME:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(sorted(FAMILY_BOX_FRAME))}")
    ow, oh = float(original_size[0]), float(original_size[1])
    if not (ow > 0 and oh > 0):
        raise ValueError(f"original image size must be positive, got {original_size!r}")
    kind = FAMILY_BOX_FRAME[family]
    if kind == "norm1000":
        return BoxFrame(kind, 1000.0, 1000.0, ow, oh)
    if resized_size is None:
        budget = budget if budget is not None else PixelBudget.for_family(family)
        resized_size = budget.resized_size(int(ow), int(oh))
    return BoxFrame(kind, float(resized_size[0]), float(resized_size[1]), ow, oh)


def frame_description(family: str | None) -> str:
    """How a prompt tells the model which coordinates to write."""
    kind = FAMILY_BOX_FRAME.get(family or "", None)
    if kind == "norm1000":
        return "[x1, y1, x2, y2] integer coordinates normalised to 0-1000 (top-left origin)"
    if kind == "pixels":
        return "[x1, y1, x2, y2] absolute pixel coordinates of the image (top-left origin)"
    return "[x1, y1, x2, y2] coordinates (top-left origin)"


# ---------------------------------------------------------------------------------------------------------
# Overlap helpers. Scalars for clarity, pairwise numpy versions for the reward hot path.


def iou(a: Box, b: Box, plus_one: bool = False) -> float:
    """Intersection over union of two [x1, y1, x2, y2] boxes; ``plus_one`` uses the (x2-x1+1) pixel convention."""
    e = 1.0 if plus_one else 0.0
    iw = min(a[2], b[2]) - max(a[0], b[0]) + e
    ih = min(a[3], b[3]) - max(a[1], b[1]) + e
    inter = max(iw, 0.0) * max(ih, 0.0)
    area_a = max(a[2] - a[0] + e, 0.0) * max(a[3] - a[1] + e, 0.0)
    area_b = max(b[2] - b[0] + e, 0.0) * max(b[3] - b[1] + e, 0.0)
    union = area_a + area_b - inter
    return float(inter / union) if union > 0 else 0.0


def giou(a: Box, b: Box) -> float:
    """Generalised IoU in [-1, 1]: IoU minus the share of the enclosing box that neither box covers."""
    inter_w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    inter_h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = inter_w * inter_h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    value = (inter / union if union > 0 else 0.0) - ((hull - union) / hull if hull > 0 else 0.0)
    return float(value)


def l1(a: Box, b: Box) -> float:
    """Sum of absolute coordinate differences (use on [0, 1]-normalised boxes: range [0, 4])."""
    return float(sum(abs(float(x) - float(y)) for x, y in zip(a, b, strict=False)))
