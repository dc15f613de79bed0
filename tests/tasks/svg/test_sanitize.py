"""The sanitizer counts drawn work, not tags, and harmless links render."""

from __future__ import annotations

import io

import pytest

from r1vision.tasks.svg.render import default_pool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer, make_term_reward
from r1vision.tasks.svg.sanitize import SanitizeLimits, sanitize
from tests.helpers.canary import canary_server

NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'


def _matplotlib_scatter(points: int = 600) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.scatter(rng.random(points), rng.random(points), s=6)
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    return buf.getvalue()


def test_matplotlib_scatter_is_accepted_and_scores():
    """Before: more than 500 <use> elements was refused outright (reward 0)."""
    svg = _matplotlib_scatter()
    assert svg.count("<use ") >= 600
    checked = sanitize(svg)
    assert checked.ok, (checked.reason, checked.detail)
    pool = default_pool()
    gt = pool.render(svg, 400, 300)
    assert gt.ok, gt
    reward = make_term_reward("pixel", SVGScorer(RewardConfig(size=400), pool))
    assert reward(None, [svg], gt_image=[gt.image]) == [pytest.approx(1.0, abs=1e-3)]


def test_unreferenced_defs_are_not_counted_but_references_are():
    limits = SanitizeLimits(max_expanded=1000)
    big_defs = "<defs>" + "<rect width='1' height='1'/>" * 1500 + "</defs>"
    # 1500 elements in <defs> that nothing draws: accepted (before: <defs> content counted as drawn)
    assert sanitize(f"<svg {NS}>{big_defs}<rect width='5' height='5'/></svg>", limits).ok
    # one group of 40 drawn 30 times through <use>: 1200 nodes, refused
    group = "<defs><g id='g'>" + "<rect width='1' height='1'/>" * 40 + "</g></defs>"
    uses = "<use href='#g'/>" * 30
    refused = sanitize(f"<svg {NS}>{group}{uses}</svg>", limits)
    assert refused.reason == "too_large" and "expands" in refused.detail
    # the same amplification through markers (url(#id) in marker-end) is counted too
    marker = "<defs><marker id='m'>" + "<rect width='1' height='1'/>" * 40 + "</marker></defs>"
    lines = "<line x1='0' y1='0' x2='5' y2='5' marker-end='url(#m)'/>" * 30
    assert sanitize(f"<svg {NS}>{marker}{lines}</svg>", limits).reason == "too_large"
    # cycles through url(#) are refused like <use> cycles
    cyc = f"<svg {NS}><pattern id='a'><rect fill='url(#b)'/></pattern><pattern id='b'><rect fill='url(#a)'/></pattern><rect width='4' height='4' fill='url(#a)'/></svg>"
    assert sanitize(cyc).reason == "parse_error"


@pytest.fixture
def canary():
    """A server on 127.0.0.1 that records every request it receives."""
    with canary_server() as server:
        yield server


def test_harmless_links_render_and_are_never_fetched(canary):
    """Before: any <a href> that was not data:/#fragment zeroed the reward."""
    host, hits = canary
    body = "<rect x='10' y='10' width='60' height='30' fill='#4C72B0'/>"
    plain = f"<svg {NS} width='100' height='60'>{body}</svg>"
    linked = f"<svg {NS} width='100' height='60'><a href='http://{host}/paper'>{body}</a>" + (
        f"<a xlink:href='https://{host}/x'><text x='5' y='55'>site</text></a></svg>"
    )
    assert sanitize(linked).ok
    pool = default_pool()
    gt = pool.render(plain, 100, 60)
    reward = make_term_reward("valid", SVGScorer(RewardConfig(size=100), pool))
    assert reward(None, [linked], gt_image=[gt.image]) == [1.0]
    # a resource reference on anything else is still refused, and nothing was fetched either way
    image = f"<svg {NS}><a href='#x'><image href='http://{host}/i.png' width='5' height='5'/></a></svg>"
    assert sanitize(image).reason == "external_resource"
    assert hits == []
