"""The VLM judge against a local server speaking the OpenAI chat-completions protocol (127.0.0.1 only)."""

from __future__ import annotations

import http.server
import json
import threading
import time

import numpy as np
import pytest

from r1vision.tasks.svg.judge import JudgeConfig, VLMJudge, make_judge_reward, parse_reply
from r1vision.tasks.svg.render import default_pool
from r1vision.tasks.svg.rewards import RewardConfig, SVGScorer

GOOD = {"presence": 0.8, "layout": 0.6, "connectivity": 1.0, "details": 0.4}  # weighted total 0.7


class Server:
    """Replies from a script of (status, content) pairs, then repeats the last one; records requests."""

    def __init__(self) -> None:
        self.script: list[tuple[int, str]] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.delay = 0.0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.headers.append(dict(self.headers))
                status, content = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                time.sleep(outer.delay)
                payload = (
                    json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
                    if status == 200
                    else json.dumps({"error": "x"})
                )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()


def _config(server: Server, **kw) -> JudgeConfig:
    assert server.url.startswith("http://127.0.0.1:")
    return JudgeConfig(base_url=server.url, model="judge-x", api_key="k", backoff_s=0.01, **kw)


def _img(value: int) -> np.ndarray:
    img = np.full((16, 16, 3), 255, np.uint8)
    img[4:12, 4:12] = value
    return img


def test_success_weighted_total_and_request_format(server):
    server.script = [(200, "Sure!\n```json\n" + json.dumps(GOOD) + "\n```")]
    score = VLMJudge(_config(server)).score(_img(0), _img(50))
    assert score.reason is None and score.total == pytest.approx(0.7)
    request = server.requests[0]
    assert request["model"] == "judge-x"
    parts = request["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
    assert all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in parts[1:])
    assert server.headers[0]["Authorization"] == "Bearer k"


def test_rate_limit_then_success(server):
    server.script = [(429, ""), (429, ""), (200, json.dumps(GOOD))]
    judge = VLMJudge(_config(server))
    assert judge.score(_img(0), _img(1)).total == pytest.approx(0.7)
    assert len(server.requests) == 3


def test_server_errors_exhaust_retries(server):
    server.script = [(503, "")]
    judge = VLMJudge(_config(server, max_retries=2))
    score = judge.score(_img(0), _img(2))
    assert score.total == 0.0 and score.reason == "judge_http_503"
    assert len(server.requests) == 3 and judge.failures["judge_http_503"] == 1


@pytest.mark.parametrize(
    "content",
    [
        "not json at all",
        '{"presence": 0.5}',
        json.dumps({**GOOD, "layout": 7}),
        json.dumps({**GOOD, "details": "high"}),
    ],
)
def test_malformed_replies_score_zero(server, content):
    server.script = [(200, content)]
    judge = VLMJudge(_config(server, malformed_retries=1))
    score = judge.score(_img(0), _img(3))
    assert score.total == 0.0 and score.reason == "judge_malformed"
    assert len(server.requests) == 2  # one retry, then give up


def test_client_error_is_not_retried(server):
    server.script = [(401, "")]
    score = VLMJudge(_config(server)).score(_img(0), _img(4))
    assert score.reason == "judge_http_401" and len(server.requests) == 1


def test_cache_and_concurrency(server):
    server.script = [(200, json.dumps(GOOD))]
    server.delay = 0.3
    judge = VLMJudge(_config(server, max_workers=8))
    pairs = [(_img(0), _img(v)) for v in range(8)]
    start = time.monotonic()
    scores = judge.score_many(pairs)
    assert time.monotonic() - start < 8 * 0.3 * 0.6  # ran concurrently
    assert [s.total for s in scores] == [pytest.approx(0.7)] * 8
    judge.score_many(pairs[:3])
    assert len(server.requests) == 8  # cached by image hashes


def test_unreachable_endpoint_fails_cleanly():
    judge = VLMJudge(
        JudgeConfig(base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.01, timeout_s=2)
    )
    score = judge.score(_img(0), _img(5))
    assert score.total == 0.0 and score.reason == "judge_connection"


def test_reward_function_skips_unrenderable(server):
    server.script = [(200, json.dumps(GOOD))]
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><rect width="8" height="8"/></svg>'
    gt = default_pool().render(svg, 16, 16).image
    scorer = SVGScorer(RewardConfig(size=16), default_pool())
    reward = make_judge_reward(_config(server), scorer)
    assert reward.__name__ == "svg_judge"
    values = reward([None] * 3, [svg, "no svg", [{"role": "assistant", "content": svg}]], gt_image=[gt] * 3)
    assert values == [pytest.approx(0.7), 0.0, pytest.approx(0.7)]
    assert len(server.requests) == 1  # identical pair judged once; the failed render never sent


def test_parse_reply_and_backend_selection(monkeypatch):
    assert (
        parse_reply('x {"presence": 1, "layout": 0, "connectivity": 0.5, "details": 0.25} y')["connectivity"]
        == 0.5
    )
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("R1VISION_JUDGE_URL", raising=False)
    assert JudgeConfig.from_env() is None
    monkeypatch.setenv("R1VISION_JUDGE_URL", "http://127.0.0.1:1/v1")
    assert JudgeConfig.from_env().base_url == "http://127.0.0.1:1/v1"
    with pytest.raises(ValueError):
        VLMJudge(JudgeConfig(backend="nope"))
