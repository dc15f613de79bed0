"""Scoring in the render workers: degenerate outputs never beat a real
attempt, the default canvas separates real damage, and the reward math runs in the render workers."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from benchmarks.svg_degrade import KINDS, degrade, figure, framed, noise

from r1vision.tasks.svg import rewards as rewards_module
from r1vision.tasks.svg import score as score_module
from r1vision.tasks.svg.render import default_pool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer, canvas_size, make_rewards
from r1vision.tasks.svg.score import compare

DEGENERATE = ("one box", "canvas colour", "blank")
REAL = ("labels wrong", "jitter +-8", "75% boxes dropped")


def _visual(scorer: SVGScorer, gt_svg: str, completions: list[str]) -> list[float]:
    (spec,) = make_rewards(scorer=scorer, combined=True)
    return spec.func(None, completions, svg_gt=[gt_svg] * len(completions))


@pytest.fixture(scope="module")
def figures():
    rng = random.Random(3)
    # ~1000 px diagrams (the case) on white and on a coloured canvas
    return [figure(rng), figure(rng, background="#F3F0E6"), figure(rng), figure(rng, background="#E8F0FF")]


def test_degenerate_outputs_never_beat_a_real_attempt(figures):
    scorer = SVGScorer(pool=default_pool())
    for k, (gt, _, _) in enumerate(figures):
        values = dict(
            zip(
                KINDS,
                _visual(scorer, gt, [degrade(gt, kind, random.Random(k)) for kind in KINDS]),
                strict=True,
            )
        )
        assert values["identical"] == pytest.approx(1.0, abs=1e-3)
        assert max(values[d] for d in DEGENERATE) < min(values[r] for r in REAL), values
        # an empty page earns only svg_valid (0.1 of the weights) plus at most a trace of overlap
        assert values["blank"] < 0.15 and values["canvas colour"] < 0.15, values


NS = 'xmlns="http://www.w3.org/2000/svg"'
# A 1200 x 900 figure of thin light-grey strokes and small text: at 256 px it has almost no local contrast.
LOW_CONTRAST = (
    f'<svg {NS} width="1200" height="900" viewBox="0 0 1200 900">'
    + "".join(
        f'<rect x="{100 + 250 * i}" y="{300 + (i % 2) * 200}" width="180" height="90" fill="none" '
        f'stroke="#AAAAAA" stroke-width="1"/><text x="{120 + 250 * i}" y="{350 + (i % 2) * 200}" '
        f'font-size="11" fill="#888888">Block {i}</text>'
        for i in range(4)
    )
    + '<line x1="280" y1="345" x2="350" y2="545" stroke="#AAAAAA" stroke-width="1"/></svg>'
)


def test_blank_page_has_no_structure_credit_on_low_contrast_figures():
    """Before: when neither image had contrast at the canvas size, svg_ssim was 1.0 for an empty SVG."""
    blank = f'<svg {NS} width="1200" height="900" viewBox="0 0 1200 900"></svg>'
    pool = default_pool()
    for size in (256, 512):
        cw, ch = canvas_size(1200, 900, size)
        gt, empty = pool.render_many([LOW_CONTRAST, blank], cw, ch)
        terms = compare(gt.image, empty.image)
        assert terms["ssim"] < 0.1 and terms["pixel"] == 0.0 and terms["edge"] == 0.0, (size, terms)
    shifted = LOW_CONTRAST.replace(
        'viewBox="0 0 1200 900">', 'viewBox="0 0 1200 900"><g transform="translate(4,3)">'
    )
    shifted = shifted.replace("</svg>", "</g></svg>")
    real, empty = _visual(SVGScorer(pool=pool), LOW_CONTRAST, [shifted, blank])
    assert empty < 0.15 < real, (empty, real)


def test_copy_of_the_canvas_colour_earns_nothing(figures):
    """Before: ink was 1 - rgb, so a page filled with a coloured figure's canvas colour matched its ink."""
    gt_svg, w, h = figures[1]
    cw, ch = canvas_size(w, h, 512)
    gt, copy = default_pool().render_many(
        [gt_svg, degrade(gt_svg, "canvas colour", random.Random(0))], cw, ch
    )
    terms = compare(gt.image, copy.image)
    assert terms["pixel"] < 0.02 and terms["edge"] == 0.0 and terms["ssim"] < 0.1, terms


def test_degradation_ladder_has_no_inversions(figures):
    """The mean reward falls with every rung of the damage ladder (benchmarks/svg_degrade.py KINDS), and
    on every figure losing all labels costs more than moving the whole drawing by 5 px. Before: a 5 px shift
    scored 0.53, below a figure without labels (0.91); at 256 px every label wrong scored 0.995."""
    assert RewardConfig().size >= 512
    scorer = SVGScorer(pool=default_pool())
    per_kind: dict[str, list[float]] = {}
    for k, (gt, _, _) in enumerate(figures):
        values = dict(
            zip(
                KINDS,
                _visual(scorer, gt, [degrade(gt, kind, random.Random(k)) for kind in KINDS]),
                strict=True,
            )
        )
        assert values["labels removed"] < values["shift 5 px"] - 0.03, values
        assert values["labels removed"] < values["labels wrong"], values
        for kind, value in values.items():
            per_kind.setdefault(kind, []).append(value)
    means = {kind: float(np.mean(v)) for kind, v in per_kind.items()}
    assert means["shift 5 px"] > 0.95, means  # a small offset is a small error
    assert means["labels wrong"] < 0.985, means
    assert means["jitter +-8"] < 0.8 and means["75% boxes dropped"] < 0.7, means
    ladder = [means[kind] for kind in KINDS if kind != "blank"]  # blank and canvas colour tie at 0.1
    assert ladder == sorted(ladder, reverse=True) and len(set(ladder)) == len(ladder), means


def test_scoring_runs_in_the_workers(figures, monkeypatch):
    """The trainer process only dispatches: with the scoring math broken here, rewards are unchanged."""
    gt_svg, w, h = figures[2]
    completions = [degrade(gt_svg, kind, random.Random(0)) for kind in ("identical", "jitter +-8", "blank")]
    before = _visual(SVGScorer(pool=default_pool()), gt_svg, completions)

    def broken(*args, **kwargs):
        raise AssertionError("scored in the trainer process")

    monkeypatch.setattr(score_module, "score", broken)
    monkeypatch.setattr(score_module, "prepare", broken)
    monkeypatch.setattr(rewards_module, "compare", broken)
    after = _visual(SVGScorer(pool=default_pool()), gt_svg, completions)
    assert after == pytest.approx(before) and after[0] > after[1] > after[2]


def test_worker_scores_equal_in_process_math(figures):
    gt_svg, w, h = figures[3]
    cw, ch = canvas_size(w, h, 512)
    pred_svg = degrade(gt_svg, "jitter +-8", random.Random(1))
    pool = default_pool()
    gt, pred = pool.render_many([gt_svg, pred_svg], cw, ch)
    (scored,) = pool.render_many(
        [pred_svg], cw, ch, gts=[("k", gt.image)], score=RewardConfig().compare_fields(), extras=True
    )
    expected = compare(gt.image, pred.image)
    assert scored.image is None and scored.scores == pytest.approx(expected, abs=1e-6)


def test_worker_missing_a_ground_truth_asks_for_it_again():
    """The parent's mirror of a worker's ground-truth cache can be wrong; the worker then answers need_gt."""
    from r1vision.tasks.svg.render import RenderPool

    svg = f'<svg {NS} width="40" height="30"><rect x="5" y="5" width="20" height="10"/></svg>'
    with RenderPool(workers=1) as pool:
        gt = pool.render(svg, 40, 30).image
        pool.start()
        pool._workers[0].gts["never-sent"] = None  # the mirror believes the worker has it
        (result,) = pool.render_many(
            [svg], 40, 30, gts=[("never-sent", gt)], score=RewardConfig().compare_fields()
        )
    assert result.ok and result.scores["pixel"] == pytest.approx(1.0)


def test_scorers_with_different_settings_share_a_pool_safely(figures):
    """A worker caches prepared ground truths; the comparison settings are part of the cache key."""
    gt_svg, w, h = figures[0]
    pred = degrade(gt_svg, "jitter +-8", random.Random(2))
    pool = default_pool()
    cw, ch = canvas_size(w, h, 512)
    gt_img, pred_img = pool.render_many([gt_svg, pred], cw, ch)
    for config in (RewardConfig(blur_sigma=1.0), RewardConfig(blur_sigma=4.0), RewardConfig(blur_sigma=1.0)):
        (record,) = SVGScorer(config, pool).score_batch([pred], gt_svgs=[gt_svg])
        assert record["pixel"] == pytest.approx(
            compare(gt_img.image, pred_img.image, config)["pixel"], abs=1e-6
        )


def test_colour_term_prices_what_the_ink_terms_cannot_see():
    """Ink is a magnitude, so a blue square where a red one should be scores as the red one on pixel, SSIM and
    edge; ``colour`` compares the colours where both images have ink (after registration)."""
    from r1vision.tasks.svg.synth_shapes import COLOURS

    def square(fill: str, dx: int = 0) -> np.ndarray:
        rgb = np.full((84, 84, 3), 255, np.uint8)
        rgb[30:54, 30 + dx : 54 + dx] = [int(fill[i : i + 2], 16) for i in (1, 3, 5)]
        return rgb

    red, blue = square(COLOURS["red"]), square(COLOURS["blue"])
    wrong = compare(red, blue)
    # colour-blind: a wrong fill is free on the ink terms
    assert min(wrong["pixel"], wrong["ssim"], wrong["edge"]) > 0.99 and wrong["colour"] < 0.6
    assert compare(red, red)["colour"] == pytest.approx(1.0)
    # registered: a small shift keeps the colour, less the shift cost every term pays
    shifted = compare(red, square(COLOURS["red"], dx=2))
    assert shifted["colour"] == pytest.approx(shifted["pixel"], abs=0.02) and shifted["colour"] > 0.9
    blank = np.full((84, 84, 3), 255, np.uint8)
    assert compare(red, blank)["colour"] == 0.0 and compare(blank, blank)["colour"] == 1.0
    # opt-in: the default reward is unchanged, a weight adds an svg_colour reward
    assert "svg_colour" not in {s.name for s in make_rewards()}
    assert "svg_colour" in {s.name for s in make_rewards({"colour": 0.2})}


@pytest.mark.parametrize("weights", [None, {"colour": 0.3}], ids=["default", "shipped_recipe"])
def test_a_framed_correct_drawing_scores_far_above_noise(figures, weights):
    """A frame stroked along the border made its colour the "canvas" (the border ring's median), so the
    whole page read as ink and a correct drawing inside a frame scored below random rectangles. The ring
    now counts as the canvas only when its colour covers a quarter of the figure."""
    scorer = SVGScorer(pool=default_pool())
    (spec,) = make_rewards(weights, scorer=scorer, combined=True)
    for k, (gt, _, _) in enumerate(figures):
        preds = [framed(gt, 0.03), framed(gt, 0.01), framed(gt, 0.03, "#4C72B0")]
        preds += [noise(gt, random.Random(100 * k + j)) for j in range(3)]
        values = spec.func(None, preds, svg_gt=[gt] * len(preds))
        worst_framed, best_noise = min(values[:3]), max(values[3:])
        assert worst_framed > 1.5 * best_noise, (k, values)
        # the canvas of the ground truth itself is still read from its border
        rgb = np.full((80, 120, 3), 250, np.uint8)
        rgb[20:60, 20:100] = (40, 70, 220)
        assert score_module.background_colour(rgb) == pytest.approx(np.full(3, 250 / 255))
        rgb[:3], rgb[-3:], rgb[:, :3], rgb[:, -3:] = 0, 0, 0, 0  # a frame: the canvas is the common colour
        assert score_module.background_colour(rgb) == pytest.approx(np.full(3, 250 / 255))


@pytest.mark.parametrize("shape", [(512, 512), (300, 512), (512, 301), (19, 19), (5, 7), (1, 1)])
def test_fast_filters_equal_scipys(shape):
    """The hand-written blur and dilation (score.py's hot path) give scipy's ``gaussian_filter`` (reflect
    border) within float32 rounding and ``maximum_filter`` exactly, small canvases included."""
    from scipy import ndimage

    rng = np.random.default_rng(sum(shape))
    x = rng.random(shape).astype(np.float32)
    x[rng.random(shape) < 0.8] = 0.0  # mostly empty, like ink
    for sigma in (0.5, 2.0, 3.3):
        fast = score_module._blur(x, sigma)
        assert fast.dtype == np.float32
        np.testing.assert_allclose(fast, ndimage.gaussian_filter(x, sigma), rtol=0, atol=5e-7)
    # Only the inked box is filtered: ink in the middle, touching a border, one pixel, none at all give the
    # whole page's sums bit for bit.
    h, w = shape
    for top, left, height, width in [
        (h // 3, w // 4, h // 5, w // 6),
        (0, w // 2, 4, w // 2),
        (h - 1, 0, 1, 1),
    ]:
        patch = np.zeros(shape, np.float32)
        patch[top : top + height, left : left + width] = x[top : top + height, left : left + width] + 0.5
        for page in (patch, np.zeros(shape, np.float32)):
            cropped = score_module._blur(page, 2.0)
            np.testing.assert_allclose(cropped, ndimage.gaussian_filter(page, 2.0), rtol=0, atol=5e-7)
            if min(shape) > 17:  # the hand-written path (a tiny canvas goes to scipy whole)
                k = np.exp(-0.5 * (np.arange(9) / 2.0) ** 2)
                k = (k / (2 * k.sum() - k[0])).astype(np.float32)
                whole = score_module._mirror_sums(score_module._mirror_sums(page, k, axis=0), k, axis=1)
                assert np.array_equal(cropped, whole), (top, left)
    for density in (0.002, 0.05, 0.5):
        mask = rng.random(shape) < density
        for radius in (0, 1, 3, 5):
            expected = mask if radius == 0 else ndimage.maximum_filter(mask, size=2 * radius + 1)
            assert np.array_equal(score_module._dilate(mask, radius), expected), (density, radius)


# The compiled filters (_fastscore.c) must give the numpy paths' numbers bit for bit; both run here.
needs_c = pytest.mark.skipif(score_module._fast is None, reason="_fastscore is not built")


def test_the_compiled_svg_filters_are_built():
    """CI and the benchmarks rely on them: an install that silently lost them must fail here."""
    if os.environ.get("R1VISION_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("R1VISION_PURE_PYTHON is set: the numpy paths are under test")
    assert score_module._fast is not None, "_fastscore is not built: reinstall with a C compiler present"


def _both(monkeypatch, fn, *args):
    """``fn(*args)`` with the compiled filters, then with the numpy paths."""
    fast = fn(*args)
    with monkeypatch.context() as m:
        m.setattr(score_module, "_fast", None)
        return fast, fn(*args)


@needs_c
@pytest.mark.parametrize("shape", [(384, 512), (257, 300), (40, 17), (17, 40), (9, 7), (7, 9)])
def test_compiled_filters_equal_the_numpy_paths(shape, monkeypatch):
    rng = np.random.default_rng(sum(shape))
    for trial in range(4):
        # ink-like pages: mostly empty, a box, values over a wide range (the running sums' rounding)
        x = (rng.random(shape) * 10.0 ** rng.integers(-6, 1, shape)).astype(np.float32)
        x[rng.random(shape) < (0.2, 0.8, 0.98, 1.0)[trial]] = 0.0
        box, ref = _both(monkeypatch, score_module._box, x)
        assert box.dtype == np.float32 and np.array_equal(box, ref), trial
        (mean, var), (ref_mean, ref_var) = _both(monkeypatch, score_module._moments, x)
        assert np.array_equal(mean, ref_mean) and np.array_equal(var, ref_var), trial
        for sigma in (0.7, 2.0):
            blur, ref = _both(monkeypatch, score_module._blur, x, sigma)
            assert blur.dtype == np.float32 and np.array_equal(blur, ref), (trial, sigma)
        mask = x > 0.5
        for radius in (1, 3, 8):
            dilated, ref = _both(monkeypatch, score_module._dilate, mask, radius)
            assert np.array_equal(dilated, ref), (trial, radius)
        rgb = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
        background = rng.random(3)
        levels, ref = _both(monkeypatch, score_module._levels, rgb, background)
        assert levels.dtype == np.int16 and np.array_equal(levels, ref), trial
        for threshold in (0.0, 0.15, 0.5, 1.5):
            edges, ref = _both(monkeypatch, score_module._edges, levels, threshold)
            assert np.array_equal(edges, ref), (trial, threshold)
        sparse = np.where(rng.random(shape) < (0.5, 0.9, 0.99, 1.0)[trial], 0, levels).astype(np.int16)
        for sigma in (0.7, 2.0):
            blurred, ref = _both(monkeypatch, score_module._blurred_ink, sparse, sigma)
            assert blurred.dtype == np.float32 and np.array_equal(blurred, ref), (trial, sigma)
        if min(shape) >= 14:  # SSIM at half resolution needs a 7x7 window
            gt = score_module.prepare(np.where(rng.random((*shape, 1)) < 0.7, 255, rgb).astype(np.uint8))
            small = np.ascontiguousarray(x[::2, ::2])
            (ratio, var_b), (ref_ratio, ref_var) = _both(monkeypatch, score_module._ssim_map, gt, small)
            assert np.array_equal(ratio, ref_ratio) and np.array_equal(var_b, ref_var), trial
    # a one-pixel change moves the blur (the comparison is not vacuous)
    x = np.zeros(shape, np.float32)
    x[shape[0] // 2, shape[1] // 2] = 1.0
    assert not np.array_equal(score_module._blur(x, 2.0), np.zeros(shape, np.float32))


@needs_c
def test_compiled_scores_equal_the_numpy_scores_on_rendered_figures(figures, monkeypatch):
    """Every term of every degradation, colour term on and off, at 512 and 96 px: the same floats."""
    from r1vision.tasks.svg.sanitize import SanitizeLimits
    from r1vision.tasks.svg.worker import _render_in_worker

    limits = SanitizeLimits()
    for size in (512, 96):
        for k, (svg, width, height) in enumerate(figures[:2]):
            w, h = canvas_size(width, height, size)
            gt = _render_in_worker(svg, w, h, limits)[1]
            preds = [
                _render_in_worker(degrade(svg, kind, random.Random(k)), w, h, limits)[1] for kind in KINDS
            ]
            for colour in (True, False):
                config = RewardConfig(colour=colour).compare_fields()

                def scores(gt=gt, preds=preds, config=config):
                    prepared = score_module.prepare(gt, config)
                    return [score_module.score(prepared, p, config) for p in preds if p is not None]

                fast, ref = _both(monkeypatch, scores)
                assert len(fast) >= len(KINDS) - 2 and fast == ref, (size, k, colour)
