"""The judge under hostile servers: robust answer parsing, an overall deadline, a response-size cap and
native-resolution images. Every server here listens on 127.0.0.1 and stops by itself."""

from __future__ import annotations

import http.server
import io
import json
import threading
import time

import numpy as np
import pytest

from r1vision.tasks.svg.judge import JudgeConfig, VLMJudge, make_judge_reward, parse_reply
from r1vision.tasks.svg.render import default_pool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer

GOOD = {"presence": 0.8, "layout": 0.6, "connectivity": 1.0, "details": 0.4}  # weighted total 0.7
ZERO = dict.fromkeys(GOOD, 0.0)


def test_braces_inside_a_reasoning_text():
    """Before: the first `{...}` (here `{box}`) was parsed, so the reply scored 0."""
    reply = json.dumps({"reasoning": "the {box} and the {arrow} are both there", **GOOD})
    assert parse_reply(reply) == GOOD
    nested = json.dumps({"notes": {"a": 1}, **GOOD, "more": ["{", "}"]})
    assert parse_reply("Here you go:\n```json\n" + nested + "\n```") == GOOD


def test_drafts_in_think_are_never_scored():
    """Before: a draft inside <think> was scored instead of the final answer."""
    reply = f"<think>first guess {json.dumps(ZERO)} hmm, no</think>\nFinal: {json.dumps(GOOD)}"
    assert parse_reply(reply) == GOOD
    with pytest.raises(ValueError):  # cut off while still thinking: no answer yet
        parse_reply(f"<think>draft {json.dumps(GOOD)} and then")
    # several complete answers: the last one counts
    assert parse_reply(f"{json.dumps(ZERO)} corrected: {json.dumps(GOOD)}") == GOOD
    # hostile replies stay bounded and raise ValueError
    for junk in ("{" * 200_000, '{"presence": ' * 50_000, "x" * 10**6):
        with pytest.raises(ValueError):
            parse_reply(junk)


class _Server:
    """127.0.0.1 server whose handler is ``respond(handler)``; records bytes it managed to send."""

    def __init__(self, respond) -> None:
        self.sent = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    respond(self, outer)
                except OSError:
                    pass  # the client hung up, as it should

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _img(value: int) -> np.ndarray:
    img = np.full((16, 16, 3), 255, np.uint8)
    img[4:12, 4:12] = value
    return img


def _drip(handler, server, seconds: float = 15.0) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    end = time.monotonic() + seconds  # the server gives up by itself: the test stays bounded
    while time.monotonic() < end:
        handler.wfile.write(b" ")
        handler.wfile.flush()
        server.sent += 1
        time.sleep(0.2)


def test_slow_drip_server_is_cut_at_the_deadline():
    """Before: each byte arrived within the socket timeout, so timeout_s=2 blocked for 20 s."""
    server = _Server(_drip)
    try:
        judge = VLMJudge(JudgeConfig(base_url=server.url, timeout_s=1.0, max_retries=3, backoff_s=0.01))
        start = time.monotonic()
        score = judge.score(_img(0), _img(1))
        elapsed = time.monotonic() - start
    finally:
        server.close()
    assert score.total == 0.0 and score.reason in ("judge_deadline", "judge_connection")
    assert elapsed < 5.0  # deadline 1 s; the drip lasts 15 s


def _huge(handler, server, total: int = 64 << 20) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()  # no Content-Length: the size is only known by reading
    chunk = b"x" * (1 << 16)
    while server.sent < total:
        handler.wfile.write(chunk)
        server.sent += len(chunk)


def _declared(handler, server) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(200 << 20))
    handler.end_headers()
    handler.wfile.write(b"{")


@pytest.mark.parametrize("respond", [_huge, _declared])
def test_response_size_is_capped(respond):
    """Before: the whole body was read (a 200 MB response added ~600 MB to the trainer)."""
    server = _Server(respond)
    try:
        judge = VLMJudge(JudgeConfig(base_url=server.url, timeout_s=20, max_response_bytes=1 << 20))
        score = judge.score(_img(0), _img(2))
    finally:
        server.close()
    assert score.total == 0.0 and score.reason == "judge_response_too_large"
    assert server.sent < 16 << 20  # the client stopped reading long before 64 MB


def test_judge_sees_native_resolution_images():
    """Before: the judge got the reward's comparison canvas (256 px) instead of the figure itself."""
    seen = []

    def respond(handler, server):
        body = json.dumps({"choices": [{"message": {"content": json.dumps(GOOD)}}]}).encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    server = _Server(respond)
    from PIL import Image

    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="300" height="200"><rect x="20" y="20" width="90" height="60"/></svg>'
    gt = default_pool().render(svg, 300, 200).image
    judge = VLMJudge(JudgeConfig(base_url=server.url, timeout_s=20))
    ask = judge._ask_openai

    def spy(target_png, pred_png, deadline):
        seen.extend(Image.open(io.BytesIO(p)).size for p in (target_png, pred_png))
        return ask(target_png, pred_png, deadline)

    judge._ask_openai = spy
    try:
        reward = make_judge_reward(judge.config, SVGScorer(RewardConfig(size=64), default_pool()), judge)
        assert reward(None, [svg], gt_image=[gt]) == [pytest.approx(0.7)]
    finally:
        server.close()
    assert seen == [(300, 200), (300, 200)]
