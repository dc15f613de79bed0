"""Every scan of model output in the SVG task is linear and length-capped.

Hostile 1 MB completions (thousands of unclosed tags, comments, ``url(``, DOCTYPEs, quotes, deep nesting) go
through the trainer-side checks (:func:`find_svg`, :func:`declares_entities`, the pool's pre-check) and the
worker-side :func:`sanitize` in this process. Before the fix, 100 kB of ``<svg `` tokens took 45 s.

How this avoids being flaky: the bound is *process CPU time* (other processes on a loaded machine do not
count) and it is 1 s per function and input, ~30x what the linear scans take here (~10-30 ms; the benchmark
prints the exact numbers) and thousands of times below what the quadratic scans took on the same input. The
one wall-clock bound (the whole reward through the worker pool) is 10 s against ~0.1 s measured.
"""

from __future__ import annotations

import time

import pytest

from r1vision.tasks.svg.extract import find_svg
from r1vision.tasks.svg.render import default_pool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer, make_rewards
from r1vision.tasks.svg.sanitize import declares_entities, sanitize

MB = 1_000_000
NS = 'xmlns="http://www.w3.org/2000/svg"'


def _fill(token: str, size: int) -> str:
    return token * (size // len(token))


def _inside(payload_token: str) -> str:
    """A complete ~480 kB SVG (under the 512 kB limit, so every check runs) in a 1 MB completion."""
    return _fill("x", 520_000) + f"<svg {NS}>" + _fill(payload_token, 480_000) + "</svg>"


HOSTILE = {
    "open svg": _fill("<svg ", MB),
    "open svg after one": "<svg>" + _fill("<svg ", MB),
    "open svg, one > at the end": "<svg>" + _fill("<svg ", MB - 6) + ">",
    "stray closers": _fill("</svg>", MB),
    "doctype": _fill("<!DOCTYPE", MB),
    "doctype bracket far": _fill("<!DOCTYPE a", MB - 1) + "[",
    "comments": _inside("<!--"),
    "cdata": _inside("<![CDATA["),
    "quotes": _inside('<g a="'),
    "url(": _fill("x", 520_000) + f"<svg {NS}><style>" + _fill("url(", 480_000) + "</style></svg>",
    "url( attribute": _fill("x", 520_000) + f'<svg {NS}><rect style="' + _fill("url(", 480_000) + '"/></svg>',
    "url( white space": _fill("x", 520_000)
    + f'<svg {NS}><rect fill="url('
    + " " * 480_000
    + 'data:,x)"/></svg>',
    "long width": _fill("x", 520_000) + f'<svg {NS} width="' + "1" * 480_000 + 'x"/>',
    "nesting": _inside("<g>"),
    "self closing": _inside("<g/>"),
    "tags without >": _inside("<rect x='1' "),
}


def _cpu(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_megabyte_scans_are_linear(name):
    text = HOSTILE[name]
    assert len(text) >= 0.98 * MB
    pool = default_pool()
    for fn in (find_svg, declares_entities, sanitize, lambda t: pool._precheck(t, 512, 512)):
        cpu = _cpu(fn, text)
        assert cpu < 1.0, (name, fn, cpu)
    assert sanitize(text).reason is not None or name in ("self closing", "url( white space")


def test_hostile_megabyte_rewards_stay_bounded():
    (spec,) = make_rewards(combined=True, scorer=SVGScorer(RewardConfig(size=64), default_pool()))
    gt = f'<svg {NS} width="64" height="64"><rect width="30" height="30"/></svg>'
    texts = list(HOSTILE.values())
    spec.func(None, [gt], svg_gt=[gt])  # warm the pool and the ground-truth cache
    start = time.monotonic()
    values = spec.func(None, texts, svg_gt=[gt] * len(texts))
    elapsed = time.monotonic() - start
    assert all(0.0 <= v <= 1.0 for v in values)
    assert elapsed / len(texts) < 10.0, elapsed


def test_deeply_nested_completion_is_text_not_recursion_error():
    from r1vision.tasks.svg.extract import completion_text

    nested: object = f'<svg {NS} width="4" height="4"/>'
    for _ in range(100_000):
        nested = [{"role": "assistant", "content": nested}]
    assert completion_text(nested).startswith("<svg")
    assert completion_text([{"type": "text", "text": "a"}, "b", {"content": ["c", None]}]) == "abc"
