"""Optional VLM judge reward with VFig's rubric: presence, layout, connectivity, details (0-1 each, 0.25 weights).

Backends: any OpenAI-compatible ``/chat/completions`` endpoint (stdlib ``urllib``, no SDK), or Gemini through
``google-genai`` when that package is importable. Requests run concurrently in a thread pool, retry with
exponential back-off (honouring ``Retry-After``) on 429, 5xx and connection errors, and are cached by the
hashes of the two images. Any failure (HTTP, timeout, malformed JSON) scores ``failure_reward`` (0) and is
counted by reason. Only rendered images are sent; a completion that does not render never reaches the API.
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
import urllib.error
import urllib.request
from collections import Counter, OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    timeout_s: float = 60.0
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


def parse_reply(text: str) -> dict[str, float]:
    """The four criteria from a judge reply (a JSON object, fences and prose tolerated); ValueError if not."""
    match = re.search(r"\{.*?\}", text or "", re.DOTALL)
    if not match:
        raise ValueError("no JSON object in the reply")
    data = json.loads(match.group(0))
    if not isinstance(data, dict):
        raise ValueError("reply JSON is not an object")
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
    def _ask_openai(self, target_png: bytes, pred_png: bytes) -> str:
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
        request = urllib.request.Request(
            cfg.base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                payload = json.loads(response.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as err:
            if err.code == 429 or err.code >= 500:
                raise _Retryable(f"http_{err.code}", _retry_after(err.headers.get("Retry-After"))) from err
            raise RuntimeError(f"http_{err.code}") from err
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            raise _Retryable("connection") from err
        except json.JSONDecodeError as err:
            raise ValueError("response body is not JSON") from err
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError("response has no choices[0].message.content") from err
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content)

    def _ask_gemini(self, target_png: bytes, pred_png: bytes) -> str:
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
        retries = malformed = 0
        while True:
            with self._lock:
                self.requests += 1
            try:
                parts = parse_reply(ask(target_png, pred_png))
                total = sum(RUBRIC_WEIGHTS[k] * v for k, v in parts.items())
                return JudgeScore(float(np.clip(total, 0.0, 1.0)), parts)
            except _Retryable as err:
                if retries >= cfg.max_retries:
                    return JudgeScore(cfg.failure_reward, None, f"judge_{err.reason}")
                delay = err.retry_after if err.retry_after is not None else cfg.backoff_s * 2**retries
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


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _image_key(image: np.ndarray) -> str:
    return hashlib.sha256(str(image.shape).encode() + np.ascontiguousarray(image).tobytes()).hexdigest()


def make_judge_reward(config: JudgeConfig, scorer: Any = None, judge: VLMJudge | None = None):
    """TRL reward ``svg_judge`` in [0, 1]: the rubric total for each completion that renders, else 0."""
    from .rewards import SVGScorer, _gt_columns

    scorer = scorer or SVGScorer()
    judge = judge or VLMJudge(config)

    def svg_judge(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        fail = float(config.failure_reward)
        try:
            images, svgs = _gt_columns(kwargs, len(completions))
            records = scorer.score_batch(completions, images, svgs)
            jobs, slots = [], []
            for i, (completion, record) in enumerate(zip(completions, records, strict=True)):
                if record["reason"] is not None:
                    continue
                gt, _ = scorer.ground_truth(images[i], svgs[i] if isinstance(svgs[i], str) else None)
                pred = scorer.rendered(completion, images[i], svgs[i] if isinstance(svgs[i], str) else None)
                if gt is not None and pred is not None:
                    jobs.append((gt, pred))
                    slots.append(i)
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
