"""The shipped SVG recipes' reward weights charge a wrong colour at least as much as a 5 px shift.

VFig's ink terms (pixel, SSIM, edge) are colour-blind by design, so with the task's default weights a drawing
whose fills and strokes all took another colour scored about as well as a perfect one. The recipes weigh the
colour term at 0.3 (the demo's measured setting); on synthetic figures drawn at 2x, as the reward tables use,
the weighted reward ranks: identical > 5 px shift >= every colour swapped (hues changed at equal ink, which
the default weights rank above the shift)."""

from __future__ import annotations

import importlib.util
import random
import re
import sys

import pytest
import yaml

from tests.helpers.paths import ROOT

spec = importlib.util.spec_from_file_location("svg_degrade", ROOT / "benchmarks" / "svg_degrade.py")
svg_degrade = importlib.util.module_from_spec(spec)
sys.modules["svg_degrade"] = svg_degrade
spec.loader.exec_module(svg_degrade)


def _colours_swapped(svg: str) -> str:
    """Every fill and stroke colour with its channels rotated (#E2F0D9 -> #D9E2F0): the same ink magnitude
    against the white canvas (the values are the same three), another hue; greys stay as they are."""
    return re.sub(
        r'(fill|stroke)="#([0-9A-Fa-f]{2})([0-9A-Fa-f]{2})([0-9A-Fa-f]{2})"',
        lambda m: f'{m.group(1)}="#{m.group(4)}{m.group(2)}{m.group(3)}"',
        svg,
    )


@pytest.mark.parametrize("recipe", ["svg_grpo.yaml", "svg_grpo_24gb.yaml"])
def test_the_recipe_charges_a_colour_swap_at_least_as_much_as_a_shift(recipe):
    from r1vision.tasks.svg.render import default_pool
    from r1vision.tasks.svg.rewards import DEFAULT_WEIGHTS, RewardConfig, SVGScorer

    options = yaml.safe_load((ROOT / "configs" / "recipes" / recipe).read_text())["task_options"]
    weights = {**DEFAULT_WEIGHTS, **options["weights"]}  # as the task merges them
    assert weights["colour"] > 0
    pool = default_pool().start()
    scorer = SVGScorer(RewardConfig(size=512, timeout_s=20.0), pool)
    for seed in range(4):
        rng = random.Random(seed)
        svg, width, height = svg_degrade.figure(rng)
        gt = pool.render(svg, width, height, timeout_s=20.0).image
        shifted, swapped = svg_degrade.degrade(svg, "shift 5 px", rng), _colours_swapped(svg)
        assert swapped != svg
        records = scorer.score_batch([f"```svg\n{c}\n```" for c in (svg, shifted, swapped)], [gt] * 3)
        total = [sum(w * r.get(k, 0.0) for k, w in weights.items()) for r in records]
        assert total[0] > total[1] >= total[2], (seed, total)
        # the ink terms alone (the task's default weights) would rank the swap above the shift
        ink = [sum(w * r.get(k, 0.0) for k, w in DEFAULT_WEIGHTS.items()) for r in records]
        assert ink[2] > ink[1], (seed, ink)
