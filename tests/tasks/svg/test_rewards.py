"""Visual reward values on hand-made pairs: identical -> max, shifted -> lower, blank -> near 0, ranges."""

from __future__ import annotations

import numpy as np
import pytest

from r1vision.tasks.svg.render import default_pool
from r1vision.tasks.svg.rewards import (
    RewardConfig,
    SVGScorer,
    canvas_size,
    compare,
    length_score,
    make_rewards,
    make_term_reward,
)

NS = 'xmlns="http://www.w3.org/2000/svg"'
FIGURE = (
    f'<svg {NS} width="200" height="120" viewBox="0 0 200 120">'
    '<rect x="20" y="30" width="60" height="40" fill="#DCE6F2" stroke="#4C72B0" stroke-width="3"/>'
    '<circle cx="150" cy="50" r="25" fill="none" stroke="#C44E52" stroke-width="3"/>'
    '<line x1="82" y1="50" x2="122" y2="50" stroke="#333" stroke-width="3"/></svg>'
)
SHIFTED = FIGURE.replace(
    'viewBox="0 0 200 120">', 'viewBox="0 0 200 120"><g transform="translate(6,4)">'
).replace("</svg>", "</g></svg>")
BLANK = f'<svg {NS} width="200" height="120"></svg>'


def _square(shift: int = 0, value: int = 0) -> np.ndarray:
    img = np.full((64, 64, 3), 255, np.uint8)
    img[16 + shift : 40 + shift, 16 + shift : 40 + shift] = value
    return img


def test_compare_identical_is_max():
    s = compare(_square(), _square())
    assert (
        s["pixel"] == pytest.approx(1.0)
        and s["ssim"] == pytest.approx(1.0)
        and s["edge"] == pytest.approx(1.0)
    )
    assert s["mse"] == 0.0


def test_compare_pixel_hand_value():
    # ink (difference from the white canvas, less the 8-grey-level dead zone) of the grey square is
    # r = (127 - 8) / (255 - 8) of the black one everywhere (blur is linear):
    # 2<A, rA> / (|A|^2 + r^2 |A|^2) = 2r / (1 + r^2)
    r = (127 - 8) / (255 - 8)
    assert compare(_square(), _square(value=128))["pixel"] == pytest.approx(2 * r / (1 + r * r), abs=1e-5)
    # mse: 24*24 pixels differ by 128/255 in all three channels
    assert compare(_square(), _square(value=128))["mse"] == pytest.approx(
        24 * 24 * (128 / 255) ** 2 / 64 / 64
    )


def test_compare_shift_lowers_and_blank_is_near_zero():
    same, near, far = (
        compare(_square(), _square()),
        compare(_square(), _square(2)),
        compare(_square(), _square(12)),
    )
    blank = compare(_square(), np.full((64, 64, 3), 255, np.uint8))
    for key in ("pixel", "ssim", "edge"):
        assert same[key] > near[key] > far[key], key
        assert 0.0 <= far[key] <= 1.0
    # 2 px on each axis is within max_shift (2.5 % of 64 px): registered, the terms lose only the shift
    # cost, shift_cost x min(1, length / radius) = 0.05 x 1; 12 px is beyond it: only the crossing corners
    # of the edges match
    assert near["pixel"] == near["ssim"] == near["edge"] == pytest.approx(0.95)
    assert far["edge"] < 0.3
    # without registration, the edges are within their 3 px tolerance and match fully
    assert compare(_square(), _square(2), RewardConfig(max_shift=0.0))["edge"] == 1.0
    assert blank["pixel"] == 0.0 and blank["edge"] == 0.0 and blank["ssim"] < 0.1
    assert compare(np.full((8, 8, 3), 255, np.uint8), np.full((8, 8, 3), 255, np.uint8))["pixel"] == 1.0


def test_registration_finds_the_offset_and_ignores_rendering_noise():
    """A whole-figure offset within max_shift is found exactly; anti-aliasing noise moves nothing."""
    from r1vision.tasks.svg.score import _radius, prepare, register

    rng = np.random.default_rng(0)
    gt = np.full((256, 320, 3), 255, np.uint8)
    for _ in range(12):  # an irregular drawing: no self-similar offset
        y, x = rng.integers(20, 200), rng.integers(20, 260)
        gt[y : y + rng.integers(4, 30), x : x + rng.integers(4, 30)] = rng.integers(0, 120)
    prepared = prepare(gt)
    radius = _radius(gt.shape[:2], RewardConfig().compare_fields())
    assert radius == 8
    from scipy import ndimage

    from r1vision.tasks.svg.score import _ink, background_colour

    for dy, dx in ((0, 0), (3, -5), (-7, 2), (8, 8)):
        moved = np.roll(np.roll(gt, dy, axis=0), dx, axis=1)
        blurred = ndimage.gaussian_filter(_ink(moved, background_colour(moved)), 2.0)
        assert register(prepared, blurred, radius) == (dy, dx)
    noisy = np.clip(gt.astype(int) + rng.integers(-6, 7, gt.shape), 0, 255).astype(np.uint8)
    blurred = ndimage.gaussian_filter(_ink(noisy, background_colour(noisy)), 2.0)
    assert register(prepared, blurred, radius) == (0, 0)


def test_compare_ranges_on_random_images():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.integers(0, 256, (2, 40, 50, 3), dtype=np.uint8)
        for key, value in compare(a, b).items():
            # the standard SSIM is a correlation ([-1, 1]); the reward terms are clipped to [0, 1]
            low = -1.0 if key == "ssim_standard" else 0.0
            assert low <= value <= 1.0, (key, value)


def test_length_and_canvas():
    assert length_score("x" * 50, "y" * 100) == 0.5
    assert length_score("x" * 300, "y" * 100) == pytest.approx(1 / 3)
    assert length_score("x", None) == 0.0
    assert canvas_size(400, 200, 256) == (256, 128)


@pytest.fixture(scope="module")
def scorer():
    pool = default_pool()
    gt = pool.render(FIGURE, 200, 120)
    assert gt.ok, gt
    return SVGScorer(RewardConfig(size=200), pool), gt.image


def test_rewards_through_the_sandbox(scorer):
    scorer, gt = scorer
    completions = [
        f"```svg\n{FIGURE}\n```",
        [{"role": "assistant", "content": SHIFTED}],
        BLANK,
        "I cannot draw this.",
    ]
    logged = {}
    values = {}
    for spec in make_rewards({"length": 0.5}, scorer=scorer):
        values[spec.name] = spec.func(
            [None] * 4,
            completions,
            gt_image=[gt] * 4,
            svg_gt=[FIGURE] * 4,
            log_metric=lambda k, v: logged.__setitem__(k, v),
            trainer_state=None,
        )
        assert spec.func.__name__ == spec.name
        assert all(0.0 <= v <= 1.0 for v in values[spec.name])
    for term in ("svg_pixel", "svg_ssim", "svg_edge"):
        full, shifted, blank, none = values[term]
        assert full == pytest.approx(1.0, abs=1e-6), term
        assert full > shifted > blank, term
        assert none == 0.0
    assert values["svg_pixel"][2] < 0.05 and values["svg_edge"][2] < 0.05
    assert values["svg_valid"] == [1.0, 1.0, 1.0, 0.0]
    assert values["svg_length"][0] == pytest.approx(1.0)
    assert logged["svg/fail_no_svg"] == 0.25 and logged["svg/render_rate"] == 0.75


def test_ground_truth_from_svg_column_and_images_column(scorer):
    scorer, gt = scorer
    pixel = make_term_reward("pixel", scorer)
    from_svg = pixel([None], [FIGURE], svg_gt=[FIGURE])
    from_images = pixel([None], [FIGURE], images=[[gt]])
    missing = pixel([None], [FIGURE])
    assert from_svg == [pytest.approx(1.0)] and from_images == [pytest.approx(1.0)]
    assert missing == [0.0]
    assert scorer.failures["no_ground_truth"] >= 1


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "1", "RGBA", "LA", "P+transparency"])
def test_a_ground_truth_image_is_its_pixels_composited_on_white(mode):
    """Images without transparency skip the composite (most dataset PNGs): the same pixels either way."""
    from PIL import Image

    from r1vision.tasks.svg.rewards import to_rgb

    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, (24, 32, 4), dtype=np.uint8)
    image = Image.fromarray(rgba).convert(mode.split("+")[0])
    if mode == "P+transparency":
        image.info["transparency"] = int(np.asarray(image)[0, 0])
    composed = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image.convert("RGBA"))
    rgb, _ = to_rgb(image)
    assert rgb.shape == (24, 32, 3) and np.array_equal(rgb, np.asarray(composed.convert("RGB")))
    if image.has_transparency_data:  # the composite did happen: not the plain conversion
        assert not np.array_equal(rgb, np.asarray(image.convert("RGB")))


def test_failure_reward_is_configurable():
    custom = SVGScorer(RewardConfig(size=64, failure_reward=-1.0), default_pool())
    assert make_term_reward("ssim", custom)([None], ["no svg here"], gt_image=[_square()]) == [-1.0]


def test_small_ground_truth_images_are_not_upsampled_and_a_blank_page_earns_no_edges():
    """An 84 px ground-truth image: the exact SVG scores 1 on every term, a blank page 0 on pixel and edge
    (GRPO in the demo found the old hole: upscaled to 512 px the figure had no edges left, and a blank page
    "matched" that with edge 1.0), and a misplaced shape lands in between."""
    from r1vision.tasks.svg.synth_shapes import shape_svg

    head = (
        f'<svg {NS} width="84" height="84" viewBox="0 0 84 84"><rect width="84" height="84" fill="#FFFFFF"/>'
    )
    exact = head + shape_svg("circle", "red", 42, 42, 10, 10) + "</svg>"
    moved = head + shape_svg("circle", "red", 50, 46, 10, 10) + "</svg>"  # overlapping, beyond registration
    blank = head + "</svg>"
    gt = default_pool().render(exact, 84, 84).image
    scorer = SVGScorer(RewardConfig(), default_pool())
    assert scorer.ground_truth(gt, None)[0].shape[:2] == (84, 84)  # compared at its own size
    rows = scorer.score_batch([exact, moved, blank], gt_images=[gt] * 3)
    assert [rows[0][t] for t in ("pixel", "ssim", "edge")] == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)
    assert rows[2]["pixel"] < 0.01 and rows[2]["edge"] == 0.0
    visual = [0.3 * (r["pixel"] + r["ssim"] + r["edge"]) for r in rows]
    assert visual[0] > visual[1] > visual[2]


def test_a_term_no_reward_weighs_is_not_computed():
    """The colour term cost 21-23 % of a score even at weight 0: the task's scorer skips it then."""
    from r1vision.tasks import get_task
    from r1vision.tasks.base import RunContext

    task = get_task("svg")
    off = task.rewards(task.parse_options({}), RunContext())
    on = task.rewards(task.parse_options({"weights": {"colour": 0.3}}), RunContext())
    scorer_of = lambda specs: next(  # noqa: E731 - the scorer the term rewards share
        c.cell_contents
        for c in specs[0].func.__closure__ or ()
        if type(c.cell_contents).__name__ == "SVGScorer"
    )
    assert scorer_of(off).config.colour is False and scorer_of(on).config.colour is True
    assert [s.name for s in on if s.name == "svg_colour"] == ["svg_colour"]
