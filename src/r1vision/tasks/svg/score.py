"""Visual similarity of a rendered prediction to its ground-truth figure: the math behind the SVG rewards.

Runs inside the render workers (numpy + scipy only, no r1vision imports), so scoring costs the trainer
nothing. Everything is computed on *ink*: the per-pixel largest channel difference from the image's own
canvas colour (the median of its border). A copy of the canvas colour, a blank drawing or a white page on a
coloured figure therefore has no ink and earns nothing from ``pixel``/``ssim``/``edge``.

Terms (all in ``[0, 1]``, higher is better; a blank ground truth matched by a blank prediction scores 1):

- ``pixel``: ``2<A,B> / (|A|^2 + |B|^2)`` on Gaussian-blurred ink images; the blur gives near misses credit.
- ``ssim``: SSIM (7x7 uniform window, the standard constants) of the blurred ink images at half resolution
  (the blur band-limits them; a quarter of the pixels to filter), averaged over the *structure* region (pixels where either image has local contrast), negative values clipped. Flat regions
  are left out so that matching the background earns nothing.
- ``edge``: F1 of ink edges (gradient above a threshold) matched within ``edge_tolerance`` pixels.
- ``colour``: where both images have ink (after registration), ``1 - `` the mean largest channel difference
  of their colours. The three terms above are colour-blind by design (ink is a magnitude: red, green and
  blue fills of the same lightness read alike), so a wrong fill colour costs them nothing; this term prices
  it. Nothing drawn where the ground truth has ink scores 0 (1 only when both are blank).

Before the terms are computed, the prediction is *registered*: moved by the whole-pixel translation, up to
``max_shift`` of the longest side, that best overlaps its blurred ink with the ground truth's (FFT
cross-correlation at half resolution, refined at full resolution). A drawing that is right but offset by a
few pixels is a small error, not half a failure (unregistered, a 5 px shift of the whole figure scored
0.53, below a figure with every label removed, 0.91). The shift costs ``shift_cost`` x its length / the
largest allowed, so the exact position still scores best. Shifting parts independently cannot be undone
by one translation, so a jittered figure still scores low.

The ground truth's share of the work (ink, blur, local moments, dilated edges) is computed once per figure
(:func:`prepare`) and cached by the caller, so a completion costs one blur and one dilation at the
comparison size and three box filters at half of it. :func:`standard_ssim` is the SSIM VFig's evaluation
reports (per-channel RGB, scikit-image defaults), for evaluation only.

The image filters (ink levels, the Gaussian blur, the 7x7 box filters, edges and their dilation) run in C when
``_fastscore`` is built (``_fastscore.c``, at install with a C compiler): the same operations in the same
order, so the same numbers bit for bit (``tests/tasks/svg/test_score.py``) at a fraction of numpy's passes
over memory. Without it, or with ``R1VISION_PURE_PYTHON=1``, the numpy/scipy paths below run.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft
from scipy import ndimage

try:  # a relative import: the render workers load this folder as a private package, without r1vision
    if os.environ.get("R1VISION_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("R1VISION_PURE_PYTHON is set")
    from . import _fastscore as _fast
except ImportError:
    _fast = None

_INKED = 0.1  # ink level (of 1) above which a pixel counts as drawn, for the colour term
# SSIM constants for data range 1 (Wang et al. 2004, as scikit-image's defaults).
_C1, _C2 = 0.01**2, 0.03**2
_WIN = 7
_DEAD_ZONE = 8  # grey levels
# Share of a figure the border ring's colour must cover to be its canvas (a frame along the border covers
# ~4-12 %; a figure's canvas, in the synthetic and VFig-style figures, well over half).
_CANVAS_SHARE = 0.25


@dataclass(frozen=True)
class RewardConfig:
    """How completions are compared with the ground truth (sent to the workers as plain fields)."""

    size: int = 512  # longest side of the comparison canvas (benchmarks/RESULTS.md "SVG" for the choice)
    blur_sigma: float = 2.0  # pixels, Gaussian blur of the ink images (pixel and ssim terms)
    structure_threshold: float = 0.05  # local ink std that counts as structure (ssim mask)
    edge_threshold: float = 0.15  # ink step between neighbouring pixels that counts as an edge
    edge_tolerance: int = 3  # pixels an edge may be off and still match
    max_shift: float = 0.025  # largest registration translation, share of the longest side (12 px at 512)
    shift_cost: float = 0.05  # the terms' loss at the largest translation (linear in its length)
    failure_reward: float = 0.0
    timeout_s: float | None = None  # per render; None = the pool's
    gt_cache_size: int = 256  # ~0.5 MB each at 512 px
    score_cache_size: int = 4096
    colour: bool = True  # compute the colour term (off when no reward weighs it: ~10 % of a score's time)

    def compare_fields(self) -> dict[str, float]:
        """The fields the scoring math needs (what a worker receives)."""
        return {
            "colour": float(self.colour),
            "blur_sigma": self.blur_sigma,
            "structure_threshold": self.structure_threshold,
            "edge_threshold": self.edge_threshold,
            "edge_tolerance": self.edge_tolerance,
            "max_shift": self.max_shift,
            "shift_cost": self.shift_cost,
        }


@dataclass(frozen=True)
class Prepared:
    """The ground truth's cached share of the comparison."""

    shape: tuple[int, int]
    background: np.ndarray  # RGB in [0, 1]
    blurred: np.ndarray  # blurred ink
    norm: float  # sum(blurred**2)
    small: np.ndarray  # ``blurred`` at half resolution (it is band-limited by the blur)
    mean: np.ndarray  # local mean of ``small`` (7x7)
    var: np.ndarray  # local variance
    structure: np.ndarray  # bool, local std above the threshold
    edges: np.ndarray  # bool
    edges_dilated: np.ndarray  # bool
    n_edges: int
    has_ink: bool
    rgb: np.ndarray  # the ground truth, RGB uint8
    inked: np.ndarray  # bool, where it has ink
    spectrum: np.ndarray | None  # conjugate FFT of ``small`` zero-padded for registration, None if off


def _levels(rgb: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Ink in grey levels (``int16``, 0-247): the largest channel difference from ``background`` less a dead
    zone. Edges, the inked mask and "has ink" are read from these integers (cheaper than from floats, and
    the same pixels: a threshold of ``t`` of 1 is a step of more than ``t x 255`` levels)."""
    bg = np.rint(np.asarray(background, np.float32) * 255).astype(np.int16)
    if _fast is not None and _c_ready(rgb, np.uint8, 3) and rgb.shape[2] == 3:
        out = np.empty(rgb.shape[:2], np.int16)
        _fast.levels(rgb, out, *rgb.shape[:2], int(bg[0]), int(bg[1]), int(bg[2]), _DEAD_ZONE)
        return out
    # Channel by channel (a reduction over a length-3 last axis is several times slower in numpy).
    ink = np.abs(rgb[..., 0].astype(np.int16) - bg[0])
    np.maximum(ink, np.abs(rgb[..., 1].astype(np.int16) - bg[1]), out=ink)
    np.maximum(ink, np.abs(rgb[..., 2].astype(np.int16) - bg[2]), out=ink)
    # A dead zone of a few grey levels: anti-aliasing and colour rounding of a canvas fill must not read as
    # faint ink everywhere (two such pages would "overlap" on the whole canvas).
    ink -= _DEAD_ZONE
    np.maximum(ink, 0, out=ink)
    # The outer pixel row/column is often a rounding strip of the aspect-fit canvas: never ink.
    ink[[0, -1], :] = 0
    ink[:, [0, -1]] = 0
    return ink


def _c_ready(x: np.ndarray, dtype: type, ndim: int = 2) -> bool:
    """Whether ``x`` can go to a C filter as it is (C-contiguous, of ``dtype`` and ``ndim``, not empty)."""
    return x.dtype == dtype and x.ndim == ndim and x.flags.c_contiguous and x.size > 0


def _ink(rgb: np.ndarray, background: np.ndarray) -> np.ndarray:
    """:func:`_levels` as ``float32`` in [0, 1]."""
    return _as_float(_levels(rgb, background))


def _as_float(levels: np.ndarray) -> np.ndarray:
    out = levels.astype(np.float32)
    out *= np.float32(1 / 255)
    return out


def _level(threshold: float) -> int:
    """The grey level a threshold in [0, 1] of ink must exceed."""
    return int(math.floor(threshold * 255 + 1e-9))


_INKED_LEVEL = _level(_INKED)  # drawn pixels, "has ink" and the colour term's mask, in grey levels


def _edges(levels: np.ndarray, threshold: float) -> np.ndarray:
    """Pixels where the ink steps by more than ``threshold`` to the right or downwards neighbour."""
    t = _level(threshold)
    if _fast is not None and _c_ready(levels, np.int16) and 0 <= t <= 255:  # (a threshold above 1 finds none)
        out = np.empty(levels.shape, bool)
        _fast.edges(levels, out, *levels.shape, t)
        return out
    out = np.zeros(levels.shape, bool)
    out[:, :-1] |= np.abs(np.diff(levels, axis=1)) > t
    out[:-1, :] |= np.abs(np.diff(levels, axis=0)) > t
    return out


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """``mask`` dilated by a ``(2 radius + 1)`` square: shifted ORs along each axis, the same result as
    ``ndimage.maximum_filter`` at a sixth of its time on a 512 px page."""
    if radius <= 0:
        return mask
    if _fast is not None and _c_ready(mask, np.bool_):
        out = np.empty_like(mask)
        _fast.dilate(mask, out, *mask.shape, radius)
        return out
    out = mask.copy()
    for k in range(1, min(radius, out.shape[0] - 1) + 1):
        out[k:] |= mask[:-k]
        out[:-k] |= mask[k:]
    rows = out.copy()
    for k in range(1, min(radius, out.shape[1] - 1) + 1):
        out[:, k:] |= rows[:, :-k]
        out[:, :-k] |= rows[:, k:]
    return out


def _blur(x: np.ndarray, sigma: float) -> np.ndarray:
    """``ndimage.gaussian_filter(x, sigma)`` of a float32 image (same kernel, radius ``4 sigma``, same
    ``reflect`` border), as sums of mirrored pairs of rows, then of columns, in float32: ~2.5x faster than
    scipy's per-line float64 loop at 512 px, equal to it within ~1e-7.

    Only the inked box and ``radius`` around it is filtered (the rest stays 0): a figure's ink covers about
    half of its page, and a crop's own mirrored border there is the zero rows it starts with, so every pixel
    sees the same sums in the same order as on the whole page (bit for bit)."""
    r = _blur_radius(sigma)
    if r < 1 or min(x.shape) <= 2 * r + 1:  # a tiny canvas: scipy's loop is cheap and handles any border
        return ndimage.gaussian_filter(x, sigma)
    rows = np.flatnonzero(x.any(axis=1))
    if not rows.size:
        return np.zeros_like(x)
    cols = np.flatnonzero(x.any(axis=0))
    r0, r1 = max(int(rows[0]) - r, 0), min(int(rows[-1]) + r + 1, x.shape[0])
    c0, c1 = max(int(cols[0]) - r, 0), min(int(cols[-1]) + r + 1, x.shape[1])
    k = _gaussian_taps(sigma)
    out = np.zeros_like(x)
    out[r0:r1, c0:c1] = _mirror_sums(_mirror_sums(x[r0:r1, c0:c1], k, axis=0), k, axis=1)
    return out


def _blur_radius(sigma: float) -> int:
    return int(4.0 * float(sigma) + 0.5)  # scipy's truncate=4


def _gaussian_taps(sigma: float) -> np.ndarray:
    """scipy's Gaussian kernel from its centre tap outwards, normalised over both sides, as float32."""
    k = np.exp(-0.5 * (np.arange(_blur_radius(sigma) + 1) / float(sigma)) ** 2)
    return (k / (2 * k.sum() - k[0])).astype(np.float32)


def _blurred_ink(levels: np.ndarray, sigma: float) -> np.ndarray:
    """``_blur(_as_float(levels), sigma)``: in C straight from the grey levels when built (no float page)."""
    r = _blur_radius(sigma)
    if _fast is None or not _c_ready(levels, np.int16) or r < 1 or min(levels.shape) <= 2 * r + 1:
        return _blur(_as_float(levels), sigma)
    out = np.zeros(levels.shape, np.float32)
    _fast.blur_levels(levels, out, *levels.shape, _gaussian_taps(sigma), float(np.float32(1 / 255)))
    return out


def _mirror_sums(x: np.ndarray, k: np.ndarray, axis: int) -> np.ndarray:
    """The symmetric filter ``k`` (centre tap first) along ``axis`` of a 2-D float32 array, reflect border
    (``d c b a | a b c d``); the arrays stay C-ordered, so every sum streams through memory."""
    r, n = len(k) - 1, x.shape[axis]

    def along(lo: int, hi: int) -> tuple[slice, ...]:
        return (slice(lo, hi), slice(None)) if axis == 0 else (slice(None), slice(lo, hi))

    shape = list(x.shape)
    shape[axis] += 2 * r
    padded = np.empty(shape, np.float32)
    padded[along(r, r + n)] = x
    padded[along(0, r)] = np.flip(x[along(0, r)], axis)
    padded[along(r + n, n + 2 * r)] = np.flip(x[along(n - r, n)], axis)
    out = x * k[0]
    tmp = np.empty_like(out)
    for i in range(1, r + 1):
        np.add(padded[along(r + i, r + i + n)], padded[along(r - i, r - i + n)], out=tmp)
        tmp *= k[i]
        out += tmp
    return out


def _box(x: np.ndarray) -> np.ndarray:
    """``ndimage.uniform_filter(x, 7)`` (the SSIM window), in C for a float32 image of at least 7x7."""
    if _fast is not None and _c_ready(x, np.float32) and min(x.shape) >= _WIN:
        out = np.empty_like(x)
        _fast.box(x, out, *x.shape, _WIN)
        return out
    return ndimage.uniform_filter(x, _WIN)


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = _box(x)
    return mean, _box(x * x) - mean * mean


def _ssim_map(gt: Prepared, small: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SSIM's ``num / den`` per pixel of the half-resolution blurred inks, and the prediction's local
    variance (for the structure mask). In C, one pass per pixel, when built."""
    if _fast is not None and _c_ready(small, np.float32) and min(small.shape) >= _WIN:
        ratio, var_b = np.empty_like(small), np.empty_like(small)
        _fast.ssim_map(gt.small, gt.mean, gt.var, small, ratio, var_b, *small.shape, _WIN, _C1, _C2)
        return ratio, var_b
    mean_b, var_b = _moments(small)
    cov = _box(gt.small * small) - gt.mean * mean_b
    num = (2 * gt.mean * mean_b + _C1) * (2 * cov + _C2)
    den = (gt.mean * gt.mean + mean_b * mean_b + _C1) * (gt.var + var_b + _C2)
    return num / den, var_b


def background_colour(rgb: np.ndarray) -> np.ndarray:
    """The canvas colour of a figure, in [0, 1]: the per-channel median of a one-pixel ring two pixels inside
    the border (the outermost pixels of a full-canvas fill are anti-aliased against white) when that colour
    covers at least :data:`_CANVAS_SHARE` of the figure; otherwise (a frame drawn along the border) the
    figure's most common colour. Read from every 4th pixel in each direction."""
    h, w = rgb.shape[:2]
    y0, y1, x0, x1 = min(2, h - 1), max(h - 3, 0), min(2, w - 1), max(w - 3, 0)
    border = np.concatenate([rgb[y0], rgb[y1], rgb[:, x0], rgb[:, x1]]).astype(np.float32)
    ring = np.median(border, axis=0)
    sample = rgb[::4, ::4]
    target = np.rint(ring).astype(np.int16)
    near = np.abs(sample[..., 0].astype(np.int16) - target[0]) <= _DEAD_ZONE  # channel by channel (_levels)
    near &= np.abs(sample[..., 1].astype(np.int16) - target[1]) <= _DEAD_ZONE
    near &= np.abs(sample[..., 2].astype(np.int16) - target[2]) <= _DEAD_ZONE
    if near.mean() >= _CANVAS_SHARE:
        return ring / 255.0
    sample = sample.reshape(-1, 3).astype(np.int16)
    # A frame: the ring is its colour, and calling it the canvas would make the whole page ink.
    codes = (sample[:, 0] >> 3) << 10 | (sample[:, 1] >> 3) << 5 | (sample[:, 2] >> 3)
    common = sample[codes == np.bincount(codes, minlength=1 << 15).argmax()]
    return np.median(common, axis=0).astype(np.float32) / 255.0


def prepare(gt: np.ndarray, config: dict | RewardConfig | None = None) -> Prepared:
    """The ground truth's share of :func:`score` (RGB ``uint8`` ``(h, w, 3)``)."""
    cfg = _fields(config)
    background = background_colour(gt)
    levels = _levels(gt, background)
    blurred = _blurred_ink(levels, cfg["blur_sigma"])
    small = np.ascontiguousarray(blurred[::2, ::2])
    mean, var = _moments(small)
    edges = _edges(levels, cfg["edge_threshold"])
    radius = _radius(gt.shape[:2], cfg)
    spectrum = np.conj(sfft.rfft2(small, _fft_shape(small.shape, radius))) if radius else None
    return Prepared(
        shape=gt.shape[:2],
        background=background,
        blurred=blurred,
        norm=float(np.vdot(blurred, blurred)),
        small=small,
        mean=mean,
        var=var,
        structure=var > cfg["structure_threshold"] ** 2,
        edges=edges,
        edges_dilated=_dilate(edges, int(cfg["edge_tolerance"])),
        n_edges=int(edges.sum()),
        has_ink=_has_ink(levels),
        rgb=np.ascontiguousarray(gt, dtype=np.uint8),
        inked=levels > _INKED_LEVEL,
        spectrum=spectrum,
    )


def _has_ink(levels: np.ndarray) -> bool:
    return bool(levels.max() > _INKED_LEVEL)


def _radius(shape: tuple[int, ...], cfg: dict) -> int:
    """The registration search radius in pixels (0: registration off)."""
    return int(round(float(cfg.get("max_shift", 0.0)) * max(shape)))


def _fft_shape(shape: tuple[int, ...], radius: int) -> tuple[int, int]:
    """The zero-padded FFT size for half-resolution images of ``shape``: room for shifts of ``radius / 2``
    without wrap-around, rounded up to a size with small prime factors (a prime length is several times
    slower)."""
    return (
        sfft.next_fast_len(shape[0] + radius // 2 + 1, real=True),
        sfft.next_fast_len(shape[1] + radius // 2 + 1, real=True),
    )


def _shifted(x: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``x`` moved by ``(dy, dx)`` pixels, zero-filled (no wrap-around)."""
    if dy == 0 and dx == 0:
        return x
    out = np.zeros_like(x)
    h, w = x.shape
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = x[
        max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


# A translation must raise the overlap by this share over none to be taken: anti-aliasing differences
# between two renderings of the same drawing must not move it.
_MIN_GAIN = 0.01


def register(gt: Prepared, blurred: np.ndarray, radius: int) -> tuple[int, int]:
    """The translation ``(dy, dx)``, within ``radius`` pixels on each axis, that maximises the overlap of the
    prediction's blurred ink ``blurred`` with the ground truth's; ``(0, 0)`` when none gains."""
    if radius <= 0 or gt.spectrum is None or not gt.has_ink:
        return 0, 0
    pad = _fft_shape(gt.small.shape, radius)
    corr = sfft.irfft2(sfft.rfft2(blurred[::2, ::2], pad) * gt.spectrum, pad)
    # corr[k] = sum gt[i] * pred[i + k] (k modulo the padded size): the prediction sits k half-pixels away
    r = radius // 2
    ks = np.arange(-r, r + 1)
    window = corr[np.ix_(ks % pad[0], ks % pad[1])]
    ky, kx = np.unravel_index(int(np.argmax(window)), window.shape)
    coarse = (2 * int(ks[ky]), 2 * int(ks[kx]))  # full-resolution pixels the prediction is off by
    if coarse == (0, 0):
        return 0, 0  # in place to half a pixel of the half-resolution grid: nothing to refine
    # refine at full resolution: the coarse estimate and its neighbours, against no shift at all
    base = float(np.vdot(gt.blurred, blurred))
    scored = {(0, 0): base}
    for dy in (coarse[0] - 1, coarse[0], coarse[0] + 1):
        for dx in (coarse[1] - 1, coarse[1], coarse[1] + 1):
            if max(abs(dy), abs(dx)) <= radius:
                scored[(dy, dx)] = float(np.vdot(gt.blurred, _shifted(blurred, -dy, -dx)))
    (dy, dx), value = max(scored.items(), key=lambda kv: kv[1])
    return (dy, dx) if value > base * (1 + _MIN_GAIN) + 1e-9 else (0, 0)


def score(gt: Prepared, pred: np.ndarray, config: dict | RewardConfig | None = None) -> dict[str, float]:
    """``{"pixel", "ssim", "edge", "colour"}`` of a prediction (RGB ``uint8`` with the ground truth's shape)."""
    cfg = _fields(config)
    if pred.shape[:2] != gt.shape:
        raise ValueError(f"prediction {pred.shape[:2]} and ground truth {gt.shape} differ in size")
    # The prediction's ink is measured from its own canvas colour: an empty page of any colour has none.
    levels = _levels(pred, background_colour(pred))
    blurred = _blurred_ink(levels, cfg["blur_sigma"])
    radius = _radius(gt.shape, cfg)
    dy, dx = register(gt, blurred, radius)
    if dy or dx:
        levels, blurred = _shifted(levels, -dy, -dx), _shifted(blurred, -dy, -dx)
    keep = 1.0 - float(cfg.get("shift_cost", 0.0)) * min(1.0, math.hypot(dy, dx) / radius) if radius else 1.0
    norm_b = float(np.vdot(blurred, blurred))
    denom = gt.norm + norm_b
    pixel = 1.0 if denom < 1e-6 else float(np.clip(2.0 * np.vdot(gt.blurred, blurred) / denom, 0.0, 1.0))

    ratio, var_b = _ssim_map(gt, np.ascontiguousarray(blurred[::2, ::2]))
    mask = gt.structure | (var_b > cfg["structure_threshold"] ** 2)
    if not mask.any():  # neither image has structure: equal only if both are empty
        has_ink = _has_ink(levels)
        ssim = 1.0 if has_ink == gt.has_ink and abs(gt.norm - norm_b) <= 0.05 * max(gt.norm, 1.0) else 0.0
    else:
        ssim = float(np.clip(ratio[mask], 0.0, 1.0).mean())

    edges = _edges(levels, cfg["edge_threshold"])
    nb = int(edges.sum())
    if gt.n_edges == 0 and nb == 0:
        # Nothing to match: equal only if both are empty (a blank page against an inked figure whose edges
        # fall below the threshold once upscaled used to score 1 here; GRPO found it).
        edge = 1.0 if not gt.has_ink and not _has_ink(levels) else 0.0
    elif gt.n_edges == 0 or nb == 0:
        edge = 0.0
    else:
        precision = float(np.count_nonzero(edges & gt.edges_dilated)) / nb
        recall = float(np.count_nonzero(gt.edges & _dilate(edges, int(cfg["edge_tolerance"])))) / gt.n_edges
        edge = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    colour = _colour(gt, pred, levels, dy * gt.shape[1] + dx) if cfg.get("colour", 1.0) else 0.0
    return {"pixel": keep * pixel, "ssim": keep * ssim, "edge": keep * float(edge), "colour": keep * colour}


def _colour(gt: Prepared, pred: np.ndarray, levels: np.ndarray, offset: int) -> float:
    """The colour term: 1 - the mean largest channel difference (of 255) over the pixels both images have
    inked. ``levels`` are the prediction's, registered onto the ground truth; its pixel ``i`` was read from
    ``i + offset`` of ``pred`` (a shifted pixel that was ink lies inside the image). In numpy: the pixels
    are few and scattered, and a C loop over the page was no faster than this gather."""
    both = np.flatnonzero(gt.inked & (levels > _INKED_LEVEL))
    if not both.size:  # nothing inked in both: equal only if both are blank
        return 1.0 if not gt.has_ink and not _has_ink(levels) else 0.0
    # A flat index is a cheaper gather than a pair of indices; integers, no float copy of the page.
    diff = pred.reshape(-1, 3).take(both + offset, axis=0).astype(np.int16)
    diff -= gt.rgb.reshape(-1, 3).take(both, axis=0)
    np.abs(diff, out=diff)
    return float(1.0 - np.maximum(np.maximum(diff[:, 0], diff[:, 1]), diff[:, 2]).mean() / 255.0)


def compare(gt: np.ndarray, pred: np.ndarray, config: dict | RewardConfig | None = None) -> dict[str, float]:
    """Terms of two RGB ``uint8`` images of the same shape, plus evaluation-only ``mse`` (RGB in [0, 1],
    lower is better) and ``ssim_standard`` (:func:`standard_ssim`)."""
    return score(prepare(gt, config), pred, config) | evaluation_metrics(gt, pred)


def evaluation_metrics(gt: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """``mse`` of the RGB values in [0, 1] and the SSIM VFig reports (not used by the rewards)."""
    a, b = gt.astype(np.float32) / 255.0, pred.astype(np.float32) / 255.0
    return {"mse": float(np.mean((a - b) ** 2)), "ssim_standard": standard_ssim(gt, pred)}


def standard_ssim(gt: np.ndarray, pred: np.ndarray) -> float:
    """The SSIM VFig's evaluation reports: scikit-image's ``structural_similarity`` on the RGB ``uint8``
    images, per channel (``channel_axis=2``, ``data_range=255``), otherwise its defaults (7x7 uniform window,
    K1=0.01, K2=0.03). Not a reward: white space counts, so an empty page scores well on a sparse figure."""
    from skimage.metrics import structural_similarity

    if min(gt.shape[:2]) < _WIN:  # below the window: 1 - mean absolute difference
        return float(1.0 - np.abs(gt.astype(np.float64) - pred.astype(np.float64)).mean() / 255.0)
    return float(structural_similarity(gt, pred, channel_axis=2, data_range=255))


def _fields(config: dict | RewardConfig | None) -> dict:
    if config is None:
        return RewardConfig().compare_fields()
    if isinstance(config, RewardConfig):
        return config.compare_fields()
    return config
