"""Local visual rewards for image -> SVG: no API, no downloads.

Each completion's SVG is rendered in the sandbox (:mod:`.render`) at the ground truth's aspect ratio, with
its longest side ``RewardConfig.size``, and compared with the ground-truth figure resized to the same canvas.
Terms (all in ``[0, 1]``, higher is better):

- ``svg_valid``: 1 when the SVG renders, else 0.
- ``svg_pixel``: ``2<A,B> / (|A|^2 + |B|^2)`` on Gaussian-blurred *ink* images (``ink = 1 - rgb``): 1 for
  identical figures, 0 for a blank prediction or disjoint ink; the blur gives credit to near misses. Because
  it is normalised by the total ink, the white background earns nothing.
- ``svg_ssim``: SSIM (scikit-image, Gaussian window) averaged over the structure region (pixels near local
  contrast in either image), negative values clipped: 1 identical, near 0 for a blank prediction.
- ``svg_edge``: F1 of Canny edges matched within ``edge_tolerance`` pixels: 1 identical, 0 blank.
- ``svg_length``: ``min(L, G) / max(L, G)`` for SVG lengths L (prediction) and G (ground truth); optional.

A failed render gives every term ``failure_reward`` (0 by default) and is counted by reason; the counts go to
TRL's ``log_metric`` as ``svg/fail_<reason>`` fractions of the batch. Scores are computed once per
(completion, ground truth) and shared by all reward functions of the step.

Ground truth comes from the ``gt_image`` column (path, PIL image, array, bytes or ``datasets.Image`` dict),
else the first entry of ``images``, else the ``svg_gt`` column rendered in the sandbox; it is cached.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage

from ..base import RewardSpec
from ..common import finite as _finite
from .extract import completion_text, find_svg
from .render import RenderPool, RenderResult, default_pool

TERMS = ("valid", "pixel", "ssim", "edge", "length")
DEFAULT_WEIGHTS = {"valid": 0.1, "pixel": 0.3, "ssim": 0.3, "edge": 0.3, "length": 0.0}
FAILURE_REASONS = (
    "no_svg",
    "truncated",
    "too_large",
    "parse_error",
    "dtd",
    "external_resource",
    "timeout",
    "memory",
    "render_error",
    "worker_crash",
    "pool_error",
    "no_ground_truth",
)


@dataclass(frozen=True)
class RewardConfig:
    """How completions are compared with the ground truth."""

    size: int = 256  # longest side of the comparison canvas
    blur_sigma: float = 2.0  # pixels, for svg_pixel
    ssim_blur: float = 2.0  # pixels; SSIM on lightly blurred images gives near misses some credit
    structure_threshold: float = 0.1  # local grey-level std that counts as structure (svg_ssim mask)
    content_margin: int = 0  # pixels the SSIM mask extends around structure
    edge_sigma: float = 1.0  # Canny smoothing
    edge_tolerance: int = 2  # pixels an edge may be off and still match
    failure_reward: float = 0.0
    timeout_s: float | None = None  # per render; None = the pool's
    gt_cache_size: int = 512
    score_cache_size: int = 4096
    render_cache_size: int = 128  # predictions kept as images (for the judge and contact sheets)


def _hash(data: bytes | str) -> str:
    return hashlib.sha1(data.encode("utf-8", "replace") if isinstance(data, str) else data).hexdigest()


def _to_rgb(image: Any) -> tuple[np.ndarray, str] | None:
    """(RGB uint8 array composited on white, cache key) from the supported ground-truth forms."""
    from PIL import Image

    if image is None:
        return None
    if isinstance(image, dict):  # datasets.Image
        image = image.get("bytes") or image.get("path")
        if image is None:
            return None
    if isinstance(image, str):
        if not os.path.isfile(image):
            return None
        key = f"{os.path.abspath(image)}:{os.path.getmtime(image)}"
        with Image.open(image) as im:
            return _pil_rgb(im), key
    if isinstance(image, (bytes, bytearray)):
        with Image.open(io.BytesIO(image)) as im:
            return _pil_rgb(im), _hash(bytes(image))
    if isinstance(image, np.ndarray):
        return _pil_rgb(Image.fromarray(image)), _hash(image.tobytes() + str(image.shape).encode())
    if isinstance(image, Image.Image):
        rgb = _pil_rgb(image)
        return rgb, _hash(rgb.tobytes() + str(rgb.shape).encode())
    return None


def _pil_rgb(im) -> np.ndarray:
    from PIL import Image

    im = im.convert("RGBA")
    white = Image.new("RGBA", im.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(white, im).convert("RGB"))


def canvas_size(width: int, height: int, size: int) -> tuple[int, int]:
    """(w, h) with the aspect ratio of ``width x height`` and the longest side ``size``."""
    scale = size / max(width, height, 1)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _resize(rgb: np.ndarray, w: int, h: int) -> np.ndarray:
    from PIL import Image

    if rgb.shape[1] == w and rgb.shape[0] == h:
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((w, h), Image.Resampling.LANCZOS))


def compare(gt: np.ndarray, pred: np.ndarray, config: RewardConfig | None = None) -> dict[str, float]:
    """Visual similarity terms of two RGB uint8 images of the same shape (see the module docstring).

    Also returns ``mse``: the mean squared error of the unblurred RGB values in [0, 1] (lower is better).
    """
    from skimage.feature import canny
    from skimage.metrics import structural_similarity

    cfg = config or RewardConfig()
    a = gt.astype(np.float32) / 255.0
    b = pred.astype(np.float32) / 255.0
    mse = float(np.mean((a - b) ** 2))
    sigma = (cfg.blur_sigma, cfg.blur_sigma, 0)
    ink_a, ink_b = ndimage.gaussian_filter(1.0 - a, sigma), ndimage.gaussian_filter(1.0 - b, sigma)
    denom = float(np.sum(ink_a * ink_a) + np.sum(ink_b * ink_b))
    pixel = 1.0 if denom < 1e-9 else float(np.clip(2.0 * np.sum(ink_a * ink_b) / denom, 0.0, 1.0))

    ga, gb = a.mean(axis=2), b.mean(axis=2)
    sa, sb = ndimage.gaussian_filter(ga, cfg.ssim_blur), ndimage.gaussian_filter(gb, cfg.ssim_blur)
    # SSIM is averaged where either image has local structure: flat regions (background, large fills) would
    # otherwise reward an empty drawing for matching a light fill.
    structure = (_local_std(sa) > cfg.structure_threshold) | (_local_std(sb) > cfg.structure_threshold)
    mask = ndimage.binary_dilation(structure, _disk(cfg.content_margin))
    if not mask.any():
        ssim = 1.0
    elif min(ga.shape) < 7:
        ssim = float(1.0 - np.abs(sa - sb)[mask].mean())
    else:
        _, smap = structural_similarity(sa, sb, data_range=1.0, gaussian_weights=True, sigma=1.5, full=True)
        ssim = float(np.clip(smap, 0.0, 1.0)[mask].mean())

    ea, eb = canny(ga, sigma=cfg.edge_sigma), canny(gb, sigma=cfg.edge_sigma)
    na, nb = int(ea.sum()), int(eb.sum())
    if na == 0 and nb == 0:
        edge = 1.0
    elif na == 0 or nb == 0:
        edge = 0.0
    else:
        tol = _disk(cfg.edge_tolerance)
        precision = float((eb & ndimage.binary_dilation(ea, tol)).sum()) / nb
        recall = float((ea & ndimage.binary_dilation(eb, tol)).sum()) / na
        edge = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"pixel": pixel, "ssim": ssim, "edge": float(edge), "mse": mse}


def _local_std(gray: np.ndarray, sigma: float = 1.5) -> np.ndarray:
    mean = ndimage.gaussian_filter(gray, sigma)
    return np.sqrt(np.maximum(ndimage.gaussian_filter(gray * gray, sigma) - mean * mean, 0.0))


def _disk(radius: int) -> np.ndarray:
    r = max(int(radius), 0)
    y, x = np.ogrid[-r : r + 1, -r : r + 1]
    return x * x + y * y <= r * r


def length_score(pred_svg: str, gt_svg: str | None) -> float:
    """``min(L, G) / max(L, G)`` of the two SVG lengths in characters; 0 without a ground-truth SVG."""
    if not gt_svg:
        return 0.0
    lp, lg = len(pred_svg.strip()), len(gt_svg.strip())
    return min(lp, lg) / max(lp, lg, 1)


class SVGScorer:
    """Renders completions (once) and scores them against cached ground truths; shared by the reward terms."""

    def __init__(self, config: RewardConfig | None = None, pool: RenderPool | None = None) -> None:
        self.config = config or RewardConfig()
        self._pool = pool
        self._gt: OrderedDict[tuple, np.ndarray | None] = OrderedDict()
        self._scores: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._renders: OrderedDict[tuple, RenderResult] = OrderedDict()
        self._lock = threading.RLock()
        self.failures: Counter[str] = Counter()

    @property
    def pool(self) -> RenderPool:
        return self._pool or default_pool()

    def ground_truth(self, image: Any = None, svg: str | None = None) -> tuple[np.ndarray | None, str]:
        """The ground-truth figure at comparison size and its cache key; ``(None, "")`` if unavailable."""
        try:
            loaded = _to_rgb(image)
        except Exception:
            loaded = None
        if loaded is not None:
            rgb, key = loaded
            cache_key = ("img", key, self.config.size)
            with self._lock:
                if cache_key in self._gt:
                    self._gt.move_to_end(cache_key)
                    return self._gt[cache_key], key
            w, h = canvas_size(rgb.shape[1], rgb.shape[0], self.config.size)
            return self._remember(cache_key, _resize(rgb, w, h)), key
        if svg:
            key = _hash(svg)
            cache_key = ("svg", key, self.config.size)
            with self._lock:
                if cache_key in self._gt:
                    return self._gt[cache_key], key
            # Ground-truth SVGs are data, not model text, but they still render in the sandbox.
            w, h = _svg_aspect_size(svg, self.config.size)
            result = self.pool.render(svg, w, h, timeout_s=self.config.timeout_s)
            return self._remember(cache_key, result.image if result.ok else None), key
        return None, ""

    def _remember(self, key: tuple, value: np.ndarray | None) -> np.ndarray | None:
        with self._lock:
            self._gt[key] = value
            while len(self._gt) > self.config.gt_cache_size:
                self._gt.popitem(last=False)
        return value

    def score_batch(
        self,
        completions: Sequence[Any],
        gt_images: Sequence[Any] | None = None,
        gt_svgs: Sequence[Any] | None = None,
        log_metric: Any = None,
    ) -> list[dict[str, Any]]:
        """Per completion: ``{"valid", "pixel", "ssim", "edge", "length", "mse", "reason", "detail"}``."""
        n = len(completions)
        gt_images = list(gt_images) if gt_images is not None else [None] * n
        gt_svgs = list(gt_svgs) if gt_svgs is not None else [None] * n
        out: list[dict[str, Any] | None] = [None] * n
        todo: list[tuple[int, str, np.ndarray | None, str, tuple]] = []
        for i, completion in enumerate(completions):
            text = completion_text(completion)
            gt_svg = gt_svgs[i] if i < len(gt_svgs) and isinstance(gt_svgs[i], str) else None
            gt, gt_key = self.ground_truth(gt_images[i] if i < len(gt_images) else None, gt_svg)
            key = (_hash(text), gt_key, self.config)
            with self._lock:
                cached = self._scores.get(key)
            if cached is not None:
                out[i] = cached
            else:
                todo.append((i, text, gt, gt_svg or "", key))
        renderable = [t for t in todo if t[2] is not None]
        results = self.pool.render_many(
            [t[1] for t in renderable],
            [t[2].shape[1] for t in renderable],
            [t[2].shape[0] for t in renderable],
            timeout_s=self.config.timeout_s,
        )
        by_index = {t[0]: r for t, r in zip(renderable, results, strict=True)}
        new_failures: Counter[str] = Counter()
        for i, text, gt, gt_svg, key in todo:
            result = by_index.get(i)
            if gt is None:
                record = self._failed("no_ground_truth")
            elif not result.ok:
                record = self._failed(result.reason or "render_error", result.detail)
            else:
                record = {
                    "valid": 1.0,
                    **compare(gt, result.image, self.config),
                    "reason": None,
                    "detail": "",
                }
                svg = find_svg(text)[0] or ""
                record["length"] = length_score(svg, gt_svg)
                self._remember_render(key, result.image)
            if record["reason"]:
                new_failures[record["reason"]] += 1
            out[i] = record
            with self._lock:
                self._scores[key] = record
                while len(self._scores) > self.config.score_cache_size:
                    self._scores.popitem(last=False)
        with self._lock:
            self.failures.update(new_failures)
        if todo and callable(log_metric):
            _log_failures(log_metric, new_failures, len(todo))
        return out  # type: ignore[return-value]

    def rendered(self, completion: Any, gt_image: Any = None, gt_svg: str | None = None) -> np.ndarray | None:
        """The prediction image of a completion scored recently (kept for the judge), else ``None``."""
        _, gt_key = self.ground_truth(gt_image, gt_svg)
        with self._lock:
            return self._renders.get((_hash(completion_text(completion)), gt_key, self.config))

    def _remember_render(self, key: tuple, image: np.ndarray) -> None:
        with self._lock:
            self._renders[key] = image
            while len(self._renders) > self.config.render_cache_size:
                self._renders.popitem(last=False)

    def _failed(self, reason: str, detail: str = "") -> dict[str, Any]:
        f = float(self.config.failure_reward)
        return {t: f for t in TERMS} | {"mse": 1.0, "reason": reason, "detail": detail}


def _svg_aspect_size(svg: str, size: int) -> tuple[int, int]:
    """Canvas of the SVG's own aspect ratio (viewBox, else width/height), longest side ``size``."""

    head = (find_svg(svg)[0] or svg)[:2000]
    vb = re.search(
        r"viewBox\s*=\s*['\"]\s*[-\d.eE+]+[\s,]+[-\d.eE+]+[\s,]+([\d.eE+]+)[\s,]+([\d.eE+]+)", head
    )
    try:
        if vb:
            return canvas_size(float(vb.group(1)), float(vb.group(2)), size)
        w = re.search(r"\swidth\s*=\s*['\"]\s*([\d.]+)", head)
        h = re.search(r"\sheight\s*=\s*['\"]\s*([\d.]+)", head)
        if w and h:
            return canvas_size(float(w.group(1)), float(h.group(1)), size)
    except (ValueError, ZeroDivisionError):
        pass
    return size, size


def _log_failures(log_metric: Any, failures: Counter[str], n: int) -> None:
    """Report every known reason (zeros included, so TRL's per-step averages are rates)."""
    try:
        log_metric("svg/render_rate", 1.0 - sum(failures.values()) / n)
        for reason in sorted(set(FAILURE_REASONS) | set(failures)):
            log_metric(f"svg/fail_{reason}", failures.get(reason, 0) / n)
    except Exception:
        pass  # logging must never break a reward


def _gt_columns(kwargs: dict[str, Any], n: int) -> tuple[list[Any], list[Any]]:
    images = kwargs.get("gt_image")
    if images is None and kwargs.get("images") is not None:
        images = [row[0] if isinstance(row, (list, tuple)) and row else row for row in kwargs["images"]]
    svgs = kwargs.get("svg_gt")
    return list(images) if images is not None else [None] * n, list(svgs) if svgs is not None else [None] * n


def make_term_reward(term: str, scorer: SVGScorer):
    """A TRL reward function returning one term (``valid``/``pixel``/``ssim``/``edge``/``length``)."""
    if term not in TERMS:
        raise ValueError(f"unknown SVG reward term {term!r}; choose from {TERMS}")

    def reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        images, svgs = _gt_columns(kwargs, len(completions))
        try:
            records = scorer.score_batch(completions, images, svgs, kwargs.get("log_metric"))
            return [_finite(r[term], scorer.config.failure_reward) for r in records]
        except Exception:
            return [float(scorer.config.failure_reward)] * len(completions)

    reward.__name__ = f"svg_{term}"
    reward.__doc__ = f"SVG reward term {term!r} in [0, 1] (see r1vision.tasks.svg.rewards)."
    return reward


def make_visual_reward(scorer: SVGScorer, weights: dict[str, float] | None = None):
    """One reward ``svg_visual``: the weight-normalised sum of the terms, in [0, 1]."""
    w = {t: float(v) for t, v in (weights or DEFAULT_WEIGHTS).items() if v}
    total = sum(w.values()) or 1.0

    def svg_visual(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        images, svgs = _gt_columns(kwargs, len(completions))
        try:
            records = scorer.score_batch(completions, images, svgs, kwargs.get("log_metric"))
        except Exception:
            return [float(scorer.config.failure_reward)] * len(completions)
        return [
            _finite(sum(r[t] * v for t, v in w.items()) / total, scorer.config.failure_reward)
            for r in records
        ]

    return svg_visual


def make_rewards(
    weights: dict[str, float] | None = None,
    config: RewardConfig | None = None,
    pool: RenderPool | None = None,
    combined: bool = False,
    scorer: SVGScorer | None = None,
) -> list[RewardSpec]:
    """Reward specs: one per term with a non-zero weight, or a single ``svg_visual`` when ``combined``."""
    scorer = scorer or SVGScorer(config, pool)
    merged = {**DEFAULT_WEIGHTS, **(weights or {})}
    unknown = set(merged) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown SVG reward term(s) {sorted(unknown)}; choose from {TERMS}")
    if combined:
        return [RewardSpec("svg_visual", make_visual_reward(scorer, merged), 1.0, 0.0, 1.0)]
    return [
        RewardSpec(f"svg_{t}", make_term_reward(t, scorer), float(v), 0.0, 1.0)
        for t, v in merged.items()
        if v
    ]
