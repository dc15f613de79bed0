"""Optional VLM judge reward with VFig's rubric: presence, layout, connectivity, details (0-1 each, 0.25 weights).

Backends: any OpenAI-compatible ``/chat/completions`` endpoint (stdlib ``http.client``, no SDK), or Gemini through
``google-genai`` when that package is importable. Requests run concurrently in a thread pool, retry with
exponential back-off (honouring ``Retry-After``) on 429, 5xx and connection errors, and are cached by the
hashes of the two images. ``timeout_s`` is an overall deadline per pair (retries and back-off included, a
slow-dripping server cut off), response bodies are capped at ``max_response_bytes``. Any failure (HTTP,
deadline, oversized or malformed reply) scores ``failure_reward`` (0) and is counted by reason. Only
rendered images are sent, both at the ground truth's own resolution; a completion that does not render
never reaches the API.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .rewards import SVGScorer, gt_columns

RUBRIC_WEIGHTS = {"presence": 0.25, "layout": 0.25, "connectivity": 0.25, "details": 0.25}
RUBRIC = (
    "The first image is a target figure; the second is a rendering of SVG code written to reproduce it. "
    "Score how well the rendering matches the target on four criteria, each from 0 (not at all) to 1 (exactly):\n"
    "- presence: every element of the target (shapes, text, arrows, icons) is present, nothing extra;\n"
    "- layout: elements have the target's positions, sizes, alignment and spacing;\n"
    "- connectivity: arrows and lines connect the same elements in the same directions;\n"
    "- details: colours, line styles, fonts and the exact text content match.\n"
    'Reply with only a JSON object: {"presence": x, "layout": x, "connectivity": x, "details": x}'
)


@dataclass(frozen=True)
class JudgeConfig:
    """Where and how to ask the judge. ``api_key=None`` reads ``R1VISION_JUDGE_API_KEY``/``OPENAI_API_KEY``
    (openai) or ``GEMINI_API_KEY`` (gemini)."""

    backend: str = "openai"  # "openai" (any compatible endpoint) or "gemini"
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    max_workers: int = 8
    max_retries: int = 4
    malformed_retries: int = 1
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 60.0  # overall deadline per image pair, retries and back-off included
    max_response_bytes: int = 4 << 20  # a longer response body is refused (counted as malformed)
    max_tokens: int = 256
    cache_size: int = 20_000
    failure_reward: float = 0.0

    @classmethod
    def from_env(cls) -> JudgeConfig | None:
        """Gemini when ``GEMINI_API_KEY`` is set and ``google-genai`` imports; else an OpenAI-compatible
        endpoint when ``R1VISION_JUDGE_URL`` is set (model ``R1VISION_JUDGE_MODEL``); else ``None``."""
        if os.environ.get("GEMINI_API_KEY") and gemini_available():
            return cls(backend="gemini", model=os.environ.get("R1VISION_JUDGE_MODEL", "gemini-2.5-flash"))
        if os.environ.get("R1VISION_JUDGE_URL"):
            return cls(
                base_url=os.environ["R1VISION_JUDGE_URL"],
                model=os.environ.get("R1VISION_JUDGE_MODEL", cls.model),
            )
        return None


@dataclass(frozen=True)
class JudgeScore:
    """The weighted total in [0, 1], the four criteria, or a failure reason."""

    total: float
    parts: dict[str, float] | None = None
    reason: str | None = None


def gemini_available() -> bool:
    try:
        import google.genai  # noqa: F401
    except Exception:
        return False
    return True


MAX_REPLY_CHARS = 32_768  # the answer is a short JSON object; only the reply's tail is searched
_MAX_PARSE_ATTEMPTS = 256


def parse_reply(text: str) -> dict[str, float]:
    """The four criteria from a judge reply; ValueError if there is no valid answer.

    The answer is the *last* complete JSON object carrying the four keys, taken after the last ``</think>``
    (a reply with an unclosed ``<think>`` has no answer yet, so drafts are never scored). Braces inside
    strings (a ``reasoning`` field) and fences or prose around the object are tolerated. The search is
    bounded: the last ``MAX_REPLY_CHARS`` characters and at most ``_MAX_PARSE_ATTEMPTS`` candidate starts.
    """
    text = text if isinstance(text, str) else ""
    close = text.rfind("</think>")
    if close >= 0:
        text = text[close + len("</think>") :]
    elif "<think>" in text:
        raise ValueError("the reply ends inside <think>: no final answer")
    text = text[-MAX_REPLY_CHARS:]
    decoder = json.JSONDecoder()
    end = len(text)
    attempts = 0
    # Right to left: the rightmost complete object with the keys wins; an inner object (or a brace in a
    # string) that fails or lacks the keys only moves the search left.
    while attempts < _MAX_PARSE_ATTEMPTS:
        start = text.rfind("{", 0, end)
        if start < 0:
            break
        attempts += 1
        end = start
        try:
            data, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(data, dict) and all(key in data for key in RUBRIC_WEIGHTS):
            return _criteria(data)
    raise ValueError("no JSON object with the four criteria in the reply")


def _criteria(data: dict) -> dict[str, float]:
    parts = {}
    for key in RUBRIC_WEIGHTS:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"criterion {key!r} is {value!r}, not a number in [0, 1]")
        parts[key] = float(value)
    return parts


def png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


class VLMJudge:
    """Scores (target, rendering) image pairs with the rubric; thread-safe, cached, never raises."""

    def __init__(self, config: JudgeConfig) -> None:
        if config.backend not in ("openai", "gemini"):
            raise ValueError(f"unknown judge backend {config.backend!r}; use 'openai' or 'gemini'")
        if config.backend == "gemini" and not gemini_available():
            raise ImportError("the gemini judge backend needs `pip install google-genai`")
        self.config = config
        self.failures: Counter[str] = Counter()
        self.requests = 0
        self._cache: OrderedDict[str, JudgeScore] = OrderedDict()
        self._lock = threading.Lock()
        self._client = None

    # -- transport
    def _ask_openai(self, target_png: bytes, pred_png: bytes, deadline: float) -> str:
        cfg = self.config
        key = cfg.api_key or os.environ.get("R1VISION_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")

        def image_part(data: bytes) -> dict[str, Any]:
            return {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()},
            }

        body = {
            "model": cfg.model,
            "temperature": 0,
            "max_tokens": cfg.max_tokens,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": RUBRIC},
                        image_part(target_png),
                        image_part(pred_png),
                    ],
                }
            ],
        }
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        status, raw, retry_after = _post(
            cfg.base_url.rstrip("/") + "/chat/completions",
            json.dumps(body).encode(),
            headers,
            deadline,
            cfg.max_response_bytes,
        )
        if status == 429 or status >= 500:
            raise _Retryable(f"http_{status}", retry_after)
        if status != 200:
            raise RuntimeError(f"http_{status}")
        try:
            payload = json.loads(raw.decode("utf-8", "replace"))
        except json.JSONDecodeError as err:
            raise ValueError("response body is not JSON") from err
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError("response has no choices[0].message.content") from err
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content)

    def _ask_gemini(self, target_png: bytes, pred_png: bytes, deadline: float) -> str:
        from google import genai
        from google.genai import types

        if self._client is None:
            self._client = genai.Client(api_key=self.config.api_key or os.environ.get("GEMINI_API_KEY"))
        try:
            response = self._client.models.generate_content(
                model=self.config.model,
                contents=[
                    RUBRIC,
                    types.Part.from_bytes(data=target_png, mime_type="image/png"),
                    types.Part.from_bytes(data=pred_png, mime_type="image/png"),
                ],
                # the SDK's own per-request timeout (ms): the remaining share of the pair's deadline
                config=types.GenerateContentConfig(
                    http_options=types.HttpOptions(timeout=max(1, int((deadline - time.monotonic()) * 1000)))
                ),
            )
        except Exception as err:
            message = str(err)
            if re.search(r"\b(429|500|502|503|504)\b|RESOURCE_EXHAUSTED|UNAVAILABLE", message):
                raise _Retryable("gemini_retryable") from err
            raise RuntimeError("gemini_error") from err
        return response.text or ""

    # -- scoring
    def score(self, target: np.ndarray, pred: np.ndarray) -> JudgeScore:
        """Score one pair of RGB uint8 images (target figure, rendered prediction)."""
        key = _image_key(target) + _image_key(pred) + self.config.backend + self.config.model
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        score = self._score_uncached(png_bytes(target), png_bytes(pred))
        with self._lock:
            if score.reason is None:  # failures are not cached: the next step may succeed
                self._cache[key] = score
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
            else:
                self.failures[score.reason] += 1
        return score

    def _score_uncached(self, target_png: bytes, pred_png: bytes) -> JudgeScore:
        cfg = self.config
        ask = self._ask_gemini if cfg.backend == "gemini" else self._ask_openai
        deadline = time.monotonic() + cfg.timeout_s  # for the whole pair: retries and back-off included
        retries = malformed = 0
        while True:
            with self._lock:
                self.requests += 1
            if time.monotonic() >= deadline:
                return JudgeScore(cfg.failure_reward, None, "judge_deadline")
            try:
                parts = parse_reply(ask(target_png, pred_png, deadline))
                total = sum(RUBRIC_WEIGHTS[k] * v for k, v in parts.items())
                return JudgeScore(float(np.clip(total, 0.0, 1.0)), parts)
            except _Retryable as err:
                if retries >= cfg.max_retries:
                    return JudgeScore(cfg.failure_reward, None, f"judge_{err.reason}")
                delay = err.retry_after if err.retry_after is not None else cfg.backoff_s * 2**retries
                remaining = deadline - time.monotonic()
                if min(delay, cfg.max_backoff_s) >= remaining:
                    return JudgeScore(cfg.failure_reward, None, f"judge_{err.reason}")
                time.sleep(min(delay, cfg.max_backoff_s))
                retries += 1
            except (ValueError, json.JSONDecodeError):
                if malformed >= cfg.malformed_retries:
                    return JudgeScore(cfg.failure_reward, None, "judge_malformed")
                malformed += 1
            except Exception as err:
                return JudgeScore(cfg.failure_reward, None, f"judge_{str(err)[:40] or type(err).__name__}")

    def score_many(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[JudgeScore]:
        """Score pairs concurrently (``max_workers`` threads); identical pairs in a batch are asked once."""
        if not pairs:
            return []
        keys = [_image_key(t) + _image_key(p) for t, p in pairs]
        unique = {k: pair for k, pair in zip(keys, pairs, strict=True)}
        with ThreadPoolExecutor(max_workers=max(1, min(self.config.max_workers, len(unique)))) as pool:
            scores = dict(zip(unique, pool.map(lambda p: self.score(*p), unique.values()), strict=True))
        return [scores[k] for k in keys]


def _post(
    url: str, body: bytes, headers: dict[str, str], deadline: float, max_bytes: int
) -> tuple[int, bytes, float | None]:
    """POST with an overall deadline and a response-size cap: ``(status, body, Retry-After)``.

    Socket timeouts alone bound each ``recv``, not the response: a server dripping one byte a second
    would hold the request forever. A timer shuts the socket down at the deadline, which unblocks any
    read, and the body is read in chunks up to ``max_bytes``.
    """
    import http.client
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RuntimeError(f"unsupported judge URL {url[:80]!r}")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Retryable("deadline")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=remaining)
    expired = threading.Event()
    sockets: list[socket.socket] = []  # the response keeps reading the socket after conn drops it

    def abort() -> None:
        expired.set()
        for sock in sockets or ([conn.sock] if conn.sock is not None else []):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(remaining, abort)
    timer.daemon = True
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.connect()
        sockets.append(conn.sock)
        if expired.is_set():
            raise _Retryable("deadline")
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        length = response.getheader("Content-Length")
        if length and length.isdigit() and int(length) > max_bytes:
            raise RuntimeError("response_too_large")
        data = bytearray()
        while True:
            chunk = response.read(min(1 << 16, max_bytes + 1 - len(data)) or 1)
            if not chunk:
                break
            data += chunk
            if len(data) > max_bytes:
                raise RuntimeError("response_too_large")  # not retried: the server means it
        if expired.is_set():
            raise _Retryable("deadline")
        return response.status, bytes(data), _retry_after(response.getheader("Retry-After"))
    except (OSError, http.client.HTTPException) as err:
        raise _Retryable("deadline" if expired.is_set() else "connection") from err
    finally:
        timer.cancel()
        conn.close()


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _image_key(image: np.ndarray) -> str:
    return hashlib.sha256(str(image.shape).encode() + np.ascontiguousarray(image).tobytes()).hexdigest()


def make_judge_reward(config: JudgeConfig, scorer: Any = None, judge: VLMJudge | None = None):
    """TRL reward ``svg_judge`` in [0, 1]: the rubric total for each completion that renders, else 0."""

    scorer = scorer or SVGScorer()
    judge = judge or VLMJudge(config)

    def svg_judge(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        fail = float(config.failure_reward)
        try:
            images, svgs = gt_columns(kwargs, len(completions))
            records = scorer.score_batch(completions, images, svgs)
            slots, targets = [], []
            for i, record in enumerate(records):
                if record["reason"] is not None:  # only renderable completions reach the API
                    continue
                gt = scorer.native_ground_truth(images[i], svgs[i] if isinstance(svgs[i], str) else None)
                if gt is not None:
                    slots.append(i)
                    targets.append(gt)
            # The judge sees both figures at the ground truth's own resolution, not the reward canvas.
            preds = scorer.pool.render_many(
                [completions[i] for i in slots],
                [t.shape[1] for t in targets],
                [t.shape[0] for t in targets],
                timeout_s=scorer.config.timeout_s,
            )
            jobs = [(t, p.image) for t, p in zip(targets, preds, strict=True) if p.ok]
            slots = [i for i, p in zip(slots, preds, strict=True) if p.ok]
            scores = judge.score_many(jobs)
            out = [fail] * len(completions)
            failures: Counter[str] = Counter()
            for i, s in zip(slots, scores, strict=True):
                out[i] = s.total if s.reason is None else fail
                if s.reason:
                    failures[s.reason] += 1
            log_metric = kwargs.get("log_metric")
            if callable(log_metric) and jobs:
                try:
                    log_metric("svg/judge_failure_rate", sum(failures.values()) / len(jobs))
                except Exception:
                    pass
            return out
        except Exception:
            return [fail] * len(completions)

    svg_judge.judge = judge  # type: ignore[attr-defined]
    return svg_judge
