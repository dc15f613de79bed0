"""Local visual rewards for image -> SVG: no API, no downloads.

Each completion's SVG is rendered in the sandbox (:mod:`.render`) at the ground truth's aspect ratio, with
its longest side ``RewardConfig.size`` (512 by default: at 256 px a figure with every label wrong still scored
0.995) or the ground-truth image's own, if smaller (it is never upsampled), and scored *in the render worker* (:mod:`.score`) against the ground-truth figure resized to the same
canvas; only the numbers come back. Terms (all in ``[0, 1]``, higher is better):

- ``svg_valid``: 1 when the SVG renders, else 0.
- ``svg_pixel``: overlap of blurred *ink* (difference from the canvas colour): 0 for any empty page.
- ``svg_ssim``: SSIM of the ink images over the structure region: near 0 for an empty page.
- ``svg_edge``: F1 of ink edges matched within ``edge_tolerance`` pixels: 0 for an empty page.
- ``svg_length``: ``min(L, G) / max(L, G)`` for SVG lengths L (prediction) and G (ground truth); optional.

A degenerate output (empty SVG, one rectangle, a copy of the canvas colour) earns at most ``svg_valid`` plus
a little overlap, below every real attempt (benchmarks/RESULTS.md, "SVG reward vs damage").

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
from typing import Any

import numpy as np

from ..base import RewardSpec
from ..common import finite as _finite
from .extract import completion_text, find_svg
from .render import RenderPool, default_pool
from .sanitize import strip_external
from .score import RewardConfig, compare  # noqa: F401  (compare: public API, re-exported)

TERMS = ("valid", "pixel", "ssim", "edge", "colour", "length")
# colour: opt-in (task_options weights), so the default reward stays the one the ladder and VFig checks measured
DEFAULT_WEIGHTS = {"valid": 0.1, "pixel": 0.3, "ssim": 0.3, "edge": 0.3, "colour": 0.0, "length": 0.0}
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


def content_hash(data: bytes | str) -> str:
    """A cache key for bytes or text (SHA-1 hex)."""
    return hashlib.sha1(data.encode("utf-8", "replace") if isinstance(data, str) else data).hexdigest()


def to_rgb(image: Any) -> tuple[np.ndarray, str] | None:
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
            return _pil_rgb(im), content_hash(bytes(image))
    if isinstance(image, np.ndarray):
        return _pil_rgb(Image.fromarray(image)), content_hash(image.tobytes() + str(image.shape).encode())
    if isinstance(image, Image.Image):
        rgb = _pil_rgb(image)
        return rgb, content_hash(rgb.tobytes() + str(rgb.shape).encode())
    return None


def _pil_rgb(im) -> np.ndarray:
    from PIL import Image

    if not im.has_transparency_data:  # nothing to composite: the same pixels at a fraction of the cost
        return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))
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
        self._recent: OrderedDict[int, tuple[Any, np.ndarray, str]] = OrderedDict()
        self._lock = threading.RLock()
        self.failures: Counter[str] = Counter()

    @property
    def pool(self) -> RenderPool:
        return self._pool or default_pool()

    def ground_truth(self, image: Any = None, svg: str | None = None) -> tuple[np.ndarray | None, str]:
        """The ground-truth figure at comparison size and its cache key; ``(None, "")`` if unavailable."""
        # GRPO repeats the same image object for every completion of a prompt: remember the last few objects
        # (holding a reference, so an id is never reused while cached) to skip decoding and hashing them.
        if image is not None and not isinstance(image, str):
            with self._lock:
                seen = self._recent.get(id(image))
            if seen is not None and seen[0] is image:
                return seen[1], seen[2]
        result = self._ground_truth(image, svg)
        if image is not None and not isinstance(image, str) and result[0] is not None:
            with self._lock:
                self._recent[id(image)] = (image, *result)
                while len(self._recent) > 16:
                    self._recent.popitem(last=False)
        return result

    def _ground_truth(self, image: Any, svg: str | None) -> tuple[np.ndarray | None, str]:
        if isinstance(image, str) and os.path.isfile(image):  # a path: the key needs no decoding
            cache_key = ("img", f"{os.path.abspath(image)}:{os.path.getmtime(image)}", self.config.size)
            with self._lock:
                if cache_key in self._gt:
                    self._gt.move_to_end(cache_key)
                    return self._gt[cache_key], cache_key[1]
        try:
            loaded = to_rgb(image)
        except Exception:
            loaded = None
        if loaded is not None:
            rgb, key = loaded
            cache_key = ("img", key, self.config.size)
            with self._lock:
                if cache_key in self._gt:
                    self._gt.move_to_end(cache_key)
                    return self._gt[cache_key], key
            # Never upsampled: a small figure (an 84 px icon) blown up to 512 px has ramps, not edges, and
            # a prediction rendered sharp there matched none of them.
            longest = min(self.config.size, max(rgb.shape[0], rgb.shape[1]))
            w, h = canvas_size(rgb.shape[1], rgb.shape[0], longest)
            return self._remember(cache_key, _resize(rgb, w, h)), key
        if svg:
            key = content_hash(svg)
            cache_key = ("svg", key, self.config.size)
            with self._lock:
                if cache_key in self._gt:
                    return self._gt[cache_key], key
            # Ground-truth SVGs are data, not model text, but they still render in the sandbox, and what they
            # would fetch (file://, http://, entities, @import) is dropped first so the rest still renders.
            w, h = _svg_aspect_size(svg, self.config.size)
            result = self.pool.render(strip_external(svg), w, h, timeout_s=self.config.timeout_s)
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
        extras: bool = False,
    ) -> list[dict[str, Any]]:
        """Per completion: ``{"valid", "pixel", "ssim", "edge", "length", "reason", "detail"}``; with
        ``extras`` also ``mse`` and ``ssim_standard`` (evaluation metrics, see :mod:`.score`)."""
        n = len(completions)
        gt_images = list(gt_images) if gt_images is not None else [None] * n
        gt_svgs = list(gt_svgs) if gt_svgs is not None else [None] * n
        out: list[dict[str, Any] | None] = [None] * n
        todo: dict[tuple, list[Any]] = {}  # key -> [indices, text, gt, gt key, gt svg]; duplicates once
        for i, completion in enumerate(completions):
            text = completion_text(completion)
            gt_svg = gt_svgs[i] if i < len(gt_svgs) and isinstance(gt_svgs[i], str) else None
            gt, gt_key = self.ground_truth(gt_images[i] if i < len(gt_images) else None, gt_svg)
            key = (content_hash(text), gt_key, self.config, extras)
            with self._lock:
                cached = self._scores.get(key)
            if cached is not None:
                out[i] = cached
            elif key in todo:
                todo[key][0].append(i)
            else:
                todo[key] = [[i], text, gt, gt_key, gt_svg or ""]
        renderable = [(key, t) for key, t in todo.items() if t[2] is not None]
        # A worker's prepared ground truth depends on the comparison settings: they are part of its key.
        fields = self.config.compare_fields()
        fields_key = content_hash(repr(sorted(fields.items())))[:12]
        results = self.pool.render_many(
            [t[1] for _, t in renderable],
            [t[2].shape[1] for _, t in renderable],
            [t[2].shape[0] for _, t in renderable],
            timeout_s=self.config.timeout_s,
            gts=[(f"{t[3]}:{t[2].shape}:{fields_key}", t[2]) for _, t in renderable],
            score=fields,
            extras=extras,
        )
        by_key = {key: r for (key, _), r in zip(renderable, results, strict=True)}
        new_failures: Counter[str] = Counter()
        for key, (indices, text, gt, _, gt_svg) in todo.items():
            result = by_key.get(key)
            if gt is None:
                record = self._failed("no_ground_truth")
            elif result is None or not result.ok or result.scores is None:
                reason = (result.reason if result is not None else None) or "render_error"
                record = self._failed(reason, result.detail if result is not None else "")
            else:
                record = {"valid": 1.0, **result.scores, "reason": None, "detail": ""}
                record["length"] = length_score(find_svg(text)[0] or "", gt_svg)
            new_failures[record["reason"]] += len(indices) if record["reason"] else 0
            for i in indices:
                out[i] = record
            with self._lock:
                self._scores[key] = record
                while len(self._scores) > self.config.score_cache_size:
                    self._scores.popitem(last=False)
        new_failures = +new_failures
        with self._lock:
            self.failures.update(new_failures)
        if todo and callable(log_metric):
            _log_failures(log_metric, new_failures, sum(len(t[0]) for t in todo.values()))
        return out  # type: ignore[return-value]

    def native_ground_truth(self, image: Any = None, svg: str | None = None, max_side: int = 2048):
        """The ground-truth figure at its own resolution (longest side capped at ``max_side``), for the
        judge; an SVG ground truth renders at its declared size. ``None`` if unavailable."""
        try:
            loaded = to_rgb(image)
        except Exception:
            loaded = None
        if loaded is not None:
            rgb = loaded[0]
            if max(rgb.shape[:2]) > max_side:
                w, h = canvas_size(rgb.shape[1], rgb.shape[0], max_side)
                rgb = _resize(rgb, w, h)
            return rgb
        if svg:
            w, h = _svg_aspect_size(svg, max_side, native=True)
            result = self.pool.render(svg, w, h, timeout_s=self.config.timeout_s)
            return result.image if result.ok else None
        return None

    def _failed(self, reason: str, detail: str = "") -> dict[str, Any]:
        f = float(self.config.failure_reward)
        return {t: f for t in TERMS} | {"mse": 1.0, "ssim_standard": f, "reason": reason, "detail": detail}


def _svg_aspect_size(svg: str, size: int, native: bool = False) -> tuple[int, int]:
    """Canvas of the SVG's own aspect ratio (viewBox, else width/height), longest side ``size``; with
    ``native``, the declared width/height when they fit in ``size``."""

    head = (find_svg(svg)[0] or svg)[:2000]
    vb = re.search(
        r"viewBox\s*=\s*['\"]\s*[-\d.eE+]+[\s,]+[-\d.eE+]+[\s,]+([\d.eE+]+)[\s,]+([\d.eE+]+)", head
    )
    try:
        if native:
            w = re.search(r"\swidth\s*=\s*['\"]\s*([\d.]+)\s*(?:px)?['\"]", head)
            h = re.search(r"\sheight\s*=\s*['\"]\s*([\d.]+)\s*(?:px)?['\"]", head)
            if w and h and 0 < float(w.group(1)) <= size and 0 < float(h.group(1)) <= size:
                return max(1, round(float(w.group(1)))), max(1, round(float(h.group(1))))
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


def gt_columns(kwargs: dict[str, Any], n: int) -> tuple[list[Any], list[Any]]:
    """(ground-truth images, ground-truth SVGs) of a batch of ``n`` from the columns TRL passes."""
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
        images, svgs = gt_columns(kwargs, len(completions))
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
        images, svgs = gt_columns(kwargs, len(completions))
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
