"""Hostile SVGs: every attack returns quickly with a reason and reward 0, reads nothing, fetches nothing."""

from __future__ import annotations

import base64
import os
import time

import numpy as np
import pytest

from r1vision.tasks.svg.extract import extract_svg, find_svg
from r1vision.tasks.svg.render import RenderPool, default_pool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer, make_term_reward
from r1vision.tasks.svg.sanitize import SanitizeLimits, sanitize
from r1vision.tasks.svg.worker import _refuse_non_data
from tests.helpers.canary import canary_server

SVG_NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
SECRET = "TOPSECRET-7f3a9c"
BOUND_S = 8.0  # generous wall-clock bound per hostile render on a loaded 2-core machine


@pytest.fixture(scope="module")
def pool():
    return default_pool().start()


@pytest.fixture(scope="module")
def canary():
    """A server on 127.0.0.1 that records every request it receives."""
    with canary_server() as server:
        yield server


@pytest.fixture(scope="module")
def secrets(tmp_path_factory):
    d = tmp_path_factory.mktemp("secret")
    text = d / "secret.txt"
    text.write_text(SECRET)
    from PIL import Image

    Image.new("RGB", (8, 8), (255, 0, 0)).save(d / "secret.png")
    fifo = d / "secret.fifo"  # opening a FIFO for reading blocks: any read attempt would time out
    os.mkfifo(fifo)
    return d


def _hostile(secrets, host: str) -> dict[str, tuple[str, set[str]]]:
    s = secrets
    use_bomb = "".join(
        f'<g id="l{k}">' + "".join(f'<use href="#l{k - 1}"/>' for _ in range(10)) + "</g>"
        for k in range(1, 9)
    )

    def nested(inner: str) -> str:  # an SVG data: URI whose *content* is hostile (checked by layer 2)
        uri = "data:image/svg+xml;base64," + base64.b64encode(inner.encode()).decode()
        return f'<svg {SVG_NS} width="8" height="8"><image href="{uri}" width="8" height="8"/></svg>'

    return {
        "nested_data_svg_file": (
            nested(f'<svg {SVG_NS}><image href="file://{s}/secret.png"/></svg>'),
            {"render_error"},
        ),
        "nested_data_svg_fifo": (
            nested(f'<svg {SVG_NS}><image href="{s}/secret.fifo"/></svg>'),
            {"render_error"},
        ),
        "nested_data_svg_http": (
            nested(f'<svg {SVG_NS}><image href="http://{host}/n.svg"/></svg>'),
            {"render_error"},
        ),
        "nested_data_svg_entity": (
            nested(
                f'<!DOCTYPE svg [<!ENTITY a SYSTEM "file://{s}/secret.txt">]><svg {SVG_NS}><text>&a;</text></svg>'
            ),
            {"render_error"},
        ),
        "file_uri_image": (
            f'<svg {SVG_NS}><image href="file://{s}/secret.png" width="8" height="8"/></svg>',
            {"external_resource"},
        ),
        "absolute_path_image": (
            f'<svg {SVG_NS}><image xlink:href="{s}/secret.png" width="8" height="8"/></svg>',
            {"external_resource"},
        ),
        "relative_path_image": (
            f'<svg {SVG_NS}><image href="secret.png" width="8" height="8"/></svg>',
            {"external_resource"},
        ),
        "fifo_image": (
            f'<svg {SVG_NS}><image href="{s}/secret.fifo" width="8" height="8"/></svg>',
            {"external_resource"},
        ),
        "text_file_use": (
            f'<svg {SVG_NS}><use href="file://{s}/secret.txt#x"/></svg>',
            {"external_resource"},
        ),
        "http_image": (
            f'<svg {SVG_NS}><image href="http://{host}/img.svg" width="8" height="8"/></svg>',
            {"external_resource"},
        ),
        "https_image": (
            f'<svg {SVG_NS}><image href="https://{host}/img.svg" width="8" height="8"/></svg>',
            {"external_resource"},
        ),
        "http_use": (
            f'<svg {SVG_NS}><use xlink:href="http://{host}/use.svg#a"/></svg>',
            {"external_resource"},
        ),
        "fe_image": (
            f'<svg {SVG_NS}><filter id="f"><feImage href="http://{host}/fe.svg"/></filter></svg>',
            {"external_resource"},
        ),
        "css_import": (
            f"<svg {SVG_NS}><style>@import url(http://{host}/a.css); rect{{fill:red}}</style></svg>",
            {"external_resource"},
        ),
        "css_import_string": (
            f"<svg {SVG_NS}><style>@import 'http://{host}/b.css';</style></svg>",
            {"external_resource"},
        ),
        "css_import_escaped": (
            f"<svg {SVG_NS}><style>@\\69mport 'http://{host}/c.css';</style></svg>",
            {"external_resource"},
        ),
        "css_url_fill": (
            f'<svg {SVG_NS}><rect width="5" height="5" style="fill:url(http://{host}/d.svg#g)"/></svg>',
            {"external_resource"},
        ),
        "css_url_file": (
            f"<svg {SVG_NS}><style>rect{{fill:url('file://{s}/secret.txt')}}</style></svg>",
            {"external_resource"},
        ),
        "attr_url_file": (
            f'<svg {SVG_NS}><rect width="5" height="5" filter="url(file://{s}/secret.txt#f)"/></svg>',
            {"external_resource"},
        ),
        "xml_base": (f'<svg {SVG_NS} xml:base="file://{s}/"><image href="#x"/></svg>', {"external_resource"}),
        "xxe": (
            f'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY xxe SYSTEM "file://{s}/secret.txt">]>'
            f"<svg {SVG_NS}><text>&xxe;</text></svg>",
            {"dtd"},
        ),
        "xxe_http": (
            f'<!DOCTYPE svg [<!ENTITY % p SYSTEM "http://{host}/p.dtd"> %p;]><svg {SVG_NS}/>',
            {"dtd"},
        ),
        "billion_laughs": (
            '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            + "".join(
                f'<!ENTITY lol{k} "{("&lol" + str(k - 1) + ";") * 10 if k > 1 else "&lol;" * 10}">'
                for k in range(1, 10)
            )
            + f"]><svg {SVG_NS}><text>&lol9;</text></svg>",
            {"dtd"},
        ),
        "undeclared_entity": (f"<svg {SVG_NS}><text>&xxe;</text></svg>", {"parse_error"}),
        "use_amplification": (
            f"<svg {SVG_NS}><defs><g id='l0'><rect width='1' height='1'/></g>{use_bomb}</defs><use href='#l8'/></svg>",
            {"too_large"},
        ),
        "use_cycle": (
            f'<svg {SVG_NS}><g id="a"><use href="#b"/></g><g id="b"><use href="#a"/></g></svg>',
            {"parse_error"},
        ),
        "deep_nesting": (f"<svg {SVG_NS}>" + "<g>" * 100_000 + "</g>" * 100_000 + "</svg>", {"too_large"}),
        "deep_nesting_disguised": (
            f"<svg {SVG_NS}>" + '<g a="/>">' * 100_000 + "</g>" * 100_000 + "</svg>",
            {"too_large"},
        ),
        "huge_canvas": (
            f'<svg {SVG_NS} width="200000" height="200000"><rect width="200000" height="200000"/></svg>',
            {"too_large"},
        ),
        "huge_viewbox": (
            f'<svg {SVG_NS} viewBox="0 0 200000 200000"><rect width="9" height="9"/></svg>',
            {"too_large"},
        ),
        "huge_blur": (
            f'<svg {SVG_NS}><filter id="b"><feGaussianBlur stdDeviation="100000"/></filter>'
            '<rect width="50" height="50" filter="url(#b)"/></svg>',
            {"too_large"},
        ),
        "too_many_elements": (f"<svg {SVG_NS}>" + "<rect/>" * 30_000 + "</svg>", {"too_large"}),
        "oversized": (f"<svg {SVG_NS}><text>{'A' * 600_000}</text></svg>", {"too_large"}),
    }


def test_hostile_suite_fails_fast_with_reason(pool, secrets, canary):
    host, hits = canary
    cases = _hostile(secrets, host)
    names = list(cases)
    start = time.monotonic()
    results = pool.render_many([cases[k][0] for k in names], 64, 64, timeout_s=5.0)
    elapsed = time.monotonic() - start
    assert elapsed < BOUND_S * 2, elapsed
    for name, result in zip(names, results, strict=True):
        assert not result.ok, name
        assert result.reason in cases[name][1], (name, result.reason, result.detail)
        assert SECRET not in result.detail, name
    assert hits == []  # no request ever reached the server


def test_hostile_rewards_are_zero_and_counted(pool, secrets, canary):
    host, hits = canary
    cases = _hostile(secrets, host)
    gt = np.full((48, 64, 3), 255, np.uint8)
    gt[10:30, 10:40] = 0
    scorer = SVGScorer(RewardConfig(size=64, timeout_s=5.0), pool)
    logged: dict[str, float] = {}
    for term in ("valid", "pixel", "ssim", "edge"):
        reward = make_term_reward(term, scorer)
        values = reward(
            [None] * len(cases),
            [[{"role": "assistant", "content": c[0]}] for c in cases.values()],
            gt_image=[gt] * len(cases),
            log_metric=lambda name, value: logged.__setitem__(name, value),
        )
        assert values == [0.0] * len(cases), term
    assert logged["svg/render_rate"] == 0.0
    assert logged["svg/fail_external_resource"] == pytest.approx(
        sum("external_resource" in c[1] for c in cases.values()) / len(cases)
    )
    assert sum(scorer.failures.values()) == len(cases)  # counted once, not once per term
    assert hits == []


def test_a_ground_truth_with_external_references_renders_without_fetching_them(pool, secrets, canary):
    """Ground-truth SVGs are data: their file://, http:// images, external entities and CSS @import are
    dropped, nothing is fetched, and the rest of the figure (a black square on white) still renders."""
    host, hits = canary
    s = secrets
    square = (
        '<rect width="64" height="64" fill="white"/><rect x="8" y="8" width="24" height="24" fill="black"/>'
    )
    refs = {
        "file": f'<image href="file://{s}/secret.png" x="40" y="40" width="16" height="16"/>',
        "http": f'<image xlink:href="http://{host}/img.png" x="40" y="40" width="16" height="16"/>',
        "import": f'<style>@import url("http://{host}/a.css"); rect {{ fill: red }}</style>',
        "css_url": f'<rect x="40" y="40" width="16" height="16" style="fill: url(http://{host}/p)"/>',
    }
    cases = {name: f'<svg {SVG_NS} width="64" height="64">{square}{ref}</svg>' for name, ref in refs.items()}
    cases["entity"] = (
        f'<!DOCTYPE svg [<!ENTITY a SYSTEM "file://{s}/secret.txt">]>'
        f'<svg {SVG_NS} width="64" height="64">{square}<text x="40" y="50">&a;</text></svg>'
    )
    scorer = SVGScorer(RewardConfig(size=64, timeout_s=5.0), pool)
    for name, svg in cases.items():
        assert not sanitize(svg).ok, name  # as model output each would be refused
        image, _ = scorer.ground_truth(None, svg)
        assert image is not None, name
        assert image[16, 16].max() < 60 and image[4, 4].min() > 200, (name, image[16, 16], image[4, 4])
        red = (image[..., 0] > 150) & (image[..., 1] < 100)
        assert not red.any(), name  # neither the secret PNG nor the imported style drew anything
    assert hits == []


def test_timeout_kills_worker_and_pool_recovers(pool):
    points = " ".join(f"L{(i * 37) % 500} {(i * 91) % 500}" for i in range(2000))
    slow = (
        f'<svg {SVG_NS} width="500" height="500"><path d="M0 0 {points}" stroke="black" stroke-width="3" '
        'stroke-dasharray="0.01" fill="none"/></svg>'
    )
    ok = f'<svg {SVG_NS} width="10" height="10"><rect width="5" height="5" fill="#00f"/></svg>'
    start = time.monotonic()
    results = pool.render_many([slow, ok], 256, 256, timeout_s=0.5)
    assert time.monotonic() - start < BOUND_S
    assert results[0].reason == "timeout"
    assert results[1].ok and tuple(results[1].image[0, 0]) == (0, 0, 255)
    again = pool.render(ok, 16, 16)
    assert again.ok and os.getpid() == pool._pid


@pytest.mark.slow
def test_memory_limit_contains_a_heavy_render():
    points = " ".join(f"L{(i * 37) % 500} {(i * 91) % 500}" for i in range(2000))
    heavy = (
        f'<svg {SVG_NS} width="500" height="500"><path d="M0 0 {points}" stroke="black" stroke-width="3" '
        'stroke-dasharray="0.02" fill="none"/></svg>'
    )
    with RenderPool(workers=1, memory_mb=48, timeout_s=20) as small:
        result = small.render(heavy, 512, 512)
        assert result.reason in {"memory", "worker_crash", "render_error"}, result
        assert small.render(f'<svg {SVG_NS} width="4" height="4"/>', 4, 4).ok  # a fresh worker took over


def test_fetcher_refuses_everything_but_data_uris(secrets):
    for url in (f"file://{secrets}/secret.txt", f"{secrets}/secret.txt", "http://127.0.0.1:9/x", "ftp://x/y"):
        with pytest.raises(ValueError):
            _refuse_non_data(url, "image/*")
    assert _refuse_non_data("data:text/plain;base64,aGk=", "text/css") == b"hi"


def test_data_uri_image_still_renders(pool):
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (0, 255, 0)).save(buf, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    svg = f'<svg {SVG_NS} width="4" height="4"><image href="{uri}" width="4" height="4"/></svg>'
    result = pool.render(svg, 8, 8)
    assert result.ok, result
    assert tuple(result.image[4, 4]) == (0, 255, 0)


def test_sanitize_keeps_benign_figures():
    svg = (
        f'<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
        f'"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg {SVG_NS} width="100" height="50">'
        '<defs><linearGradient id="g"><stop offset="0"/></linearGradient></defs>'
        '<rect width="9" height="9" fill="url(#g)" style="stroke: url(#g)"/><use href="#g"/></svg>'
    )
    checked = sanitize(svg)
    assert checked.ok, checked
    assert checked.svg.startswith("<svg") and "DOCTYPE" not in checked.svg
    assert (
        sanitize("<svg>" + "<g>" * 10 + "</g>" * 10 + "</svg>", SanitizeLimits(max_depth=5)).reason
        == "too_large"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Here:\n```svg\n<svg width='1'><rect/></svg>\n```\nDone", "<svg width='1'><rect/></svg>"),
        ("<svg a='1'><svg b='2'></svg><g/></svg> trailing <svg/>", "<svg a='1'><svg b='2'></svg><g/></svg>"),
        ("x <svg/> y", "<svg/>"),
        ("</svg> <SVG viewBox='0 0 1 1'></SVG>", "<SVG viewBox='0 0 1 1'></SVG>"),
        ("<svgfoo></svgfoo>", None),
        ("<svg width='1'><rect/>", None),
        ("no svg at all", None),
    ],
)
def test_extract(text, expected):
    assert extract_svg(text) == expected
    assert extract_svg([{"role": "assistant", "content": [{"type": "text", "text": text}]}]) == expected


def test_extract_reasons():
    assert find_svg("nothing") == (None, "no_svg")
    assert find_svg("<svg><g>") == (None, "truncated")
