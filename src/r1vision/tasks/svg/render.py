"""Sandboxed SVG rendering: a pool of worker processes, never the caller's process.

Isolation, in layers:

1. :func:`~.sanitize.sanitize` (limits, no DTD/entities, only ``data:`` URIs) runs *inside* the worker, so even
   parsing hostile XML happens outside the trainer.
2. CairoSVG runs with ``unsafe=False`` and a ``url_fetcher`` that refuses everything but ``data:`` URIs.
3. Each worker is a fresh interpreter (``python -I``, its own session, no inherited descriptors) with
   ``RLIMIT_AS`` (baseline + ``memory_mb``), no core dumps, a CPU-time backstop and death with its parent.
4. The parent enforces a wall-clock limit per render by SIGKILLing the worker, and recycles workers after
   ``max_renders_per_worker`` renders or any memory error.
5. Replies are length-framed JSON + raw pixels, never pickle: a compromised worker cannot run code in the
   trainer by what it sends back.

Given ground truths (``render_many(..., gts=..., score=...)``), the workers also *score* each rendering
(:mod:`.score`) and send back only the numbers, so the reward math runs in parallel outside the trainer.

Workers are started with ``subprocess`` (fork+exec, so safe next to torch threads) rather than
``multiprocessing``'s spawn/forkserver: those re-import the caller's ``__main__`` in every worker, and a
training script that imports ``r1vision`` (hence transformers) would cost seconds and hundreds of MB per
worker. The worker loads only ``worker.py``, ``sanitize.py``, ``extract.py`` and ``score.py`` (see
:mod:`.worker`), as a private package.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .extract import completion_text, find_svg
from .sanitize import DTD, TOO_LARGE, SanitizeLimits, declares_entities
from .worker import (
    _FRAME,
    _MAX_HEADER,
    BAD_SIZE,
    GT_CACHE,
    MEMORY,
    NEED_GT,
    POOL_ERROR,
    RENDER_ERROR,
    TIMEOUT,
    WORKER_CRASH,
    _frame,
)


@dataclass(frozen=True)
class RenderResult:
    """An RGB ``uint8`` image of shape ``(height, width, 3)`` on white and/or the worker's ``scores`` against
    a ground truth, or neither and a failure ``reason``."""

    image: np.ndarray | None
    reason: str | None = None
    detail: str = ""
    seconds: float = 0.0
    scores: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None and (self.image is not None or self.scores is not None)


_SANDBOX_PACKAGE = "_r1vision_svg_sandbox"
_BOOTSTRAP = (
    "import importlib, sys, types\n"
    f"pkg = types.ModuleType({_SANDBOX_PACKAGE!r}); pkg.__path__ = [sys.argv.pop(1)]\n"
    f"sys.modules[{_SANDBOX_PACKAGE!r}] = pkg\n"
    f"importlib.import_module({_SANDBOX_PACKAGE!r} + '.worker')._worker_main()\n"
)


# ----------------------------------------------------------------------------------------------- parent side


class _Worker:
    """One worker process and its read buffer, as seen from the parent."""

    def __init__(self, config: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOTSTRAP, str(Path(__file__).resolve().parent), config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = bytearray()
        self.ready = False
        self.started = time.monotonic()
        self.task: tuple[int, int, int] | None = None  # (index, width, height)
        self.deadline = 0.0
        self.renders = 0
        self.recycle = False  # the worker asked to be replaced (after a memory error)
        self.gts: OrderedDict[str, None] = OrderedDict()  # mirror of the worker's ground-truth LRU

    def gt_pixels(self, key: str, image: np.ndarray, force: bool) -> bytes:
        """The ground truth's pixels when the worker lacks them (as far as the mirror knows), else b""."""
        known = key in self.gts and not force
        self.gts[key] = None
        self.gts.move_to_end(key)
        while len(self.gts) > GT_CACHE:
            self.gts.popitem(last=False)
        return b"" if known else np.ascontiguousarray(image, np.uint8).tobytes()

    def send(self, header: dict[str, Any], body: bytes) -> bool:
        try:
            self.proc.stdin.write(_frame(header, body))
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def read(self) -> bool:
        """Drain the pipe into the buffer; False on end of file (the worker exited)."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self.buffer += chunk

    def messages(self, max_body: int):
        """Complete ``(header, body)`` frames in the buffer; raises ValueError on a malformed frame."""
        while len(self.buffer) >= _FRAME.size:
            header_len, body_len = _FRAME.unpack_from(self.buffer)
            if header_len > _MAX_HEADER or body_len > max_body:
                raise ValueError(f"oversized frame ({header_len}, {body_len})")
            end = _FRAME.size + header_len + body_len
            if len(self.buffer) < end:
                return
            header = json.loads(bytes(self.buffer[_FRAME.size : _FRAME.size + header_len]))
            body = bytes(self.buffer[_FRAME.size + header_len : end])
            del self.buffer[:end]
            if not isinstance(header, dict):
                raise ValueError("frame header is not an object")
            yield header, body

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        self.retire(wait=1.0)

    def retire(self, wait: float = 0.0) -> bool:
        """Close the pipes (a live worker exits on EOF); True once the process is reaped."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except Exception:
                pass
        try:
            self.proc.wait(timeout=wait) if wait else self.proc.poll()
        except subprocess.TimeoutExpired:
            pass
        return self.proc.returncode is not None


class RenderPool:
    """A pool of sandboxed render workers. Thread-safe; one batch renders at a time.

    ``timeout_s`` is the wall-clock limit of one render (the worker is killed past it), ``memory_mb`` the
    address space a worker may add to its baseline, ``max_renders_per_worker`` the recycling period.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout_s: float = 10.0,
        memory_mb: int = 1024,
        max_renders_per_worker: int = 500,
        limits: SanitizeLimits | None = None,
        start_timeout_s: float = 60.0,
        max_side: int = 4096,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.n_workers = workers
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_renders_per_worker = int(max_renders_per_worker)
        self.limits = limits or SanitizeLimits()
        self.start_timeout_s = float(start_timeout_s)
        self.max_side = int(max_side)
        self.counts: Counter[str] = Counter()
        self._config = json.dumps({"memory_mb": self.memory_mb, "limits": self.limits.__dict__})
        self._workers: list[_Worker] = []
        self._retiring: list[_Worker] = []
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

    # -- lifecycle
    def start(self) -> RenderPool:
        """Start the workers now (otherwise they start on the first render)."""
        with self._lock:
            self._check_pid()
            self._fill()
        return self

    def close(self) -> None:
        """Stop every worker; the pool restarts them if used again."""
        with self._lock:
            for worker in self._workers + self._retiring:
                worker.retire(wait=0.5) or worker.kill()
            self._workers, self._retiring = [], []

    def __enter__(self) -> RenderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_pid(self) -> None:
        if os.getpid() != self._pid:  # forked child: the workers belong to the parent, start our own
            self._workers, self._retiring, self._pid = [], [], os.getpid()

    def _fill(self) -> None:
        self._retiring = [w for w in self._retiring if not w.retire()]
        while len(self._workers) < self.n_workers:
            self._workers.append(_Worker(self._config))

    def _drop(self, worker: _Worker, kill: bool) -> None:
        self._workers.remove(worker)
        if kill:
            worker.kill()
        elif not worker.retire():
            self._retiring.append(worker)

    # -- rendering
    def render(self, svg: Any, width: int, height: int, timeout_s: float | None = None) -> RenderResult:
        """Render one SVG (or a completion containing one); never raises."""
        return self.render_many([svg], width, height, timeout_s)[0]

    def render_many(
        self,
        svgs: Sequence[Any],
        width: int | Sequence[int],
        height: int | Sequence[int],
        timeout_s: float | None = None,
        gts: Sequence[tuple[str, np.ndarray] | None] | None = None,
        score: dict[str, float] | None = None,
        extras: bool = False,
        image: bool = False,
    ) -> list[RenderResult]:
        """Render a batch over the pool; ``width``/``height`` are one size for all or one per item.

        With ``gts`` (per item ``(key, RGB uint8 image of that item's size)``) and ``score`` (the fields of
        :meth:`.score.RewardConfig.compare_fields`), the workers score each rendering and results carry
        ``scores`` (plus ``mse``/``ssim_standard`` when ``extras``) and an image only when ``image``.
        """
        n = len(svgs)
        results: list[RenderResult | None] = [None] * n
        try:  # never raise into the trainer, whatever the input
            widths = list(width) if isinstance(width, Sequence) else [width] * n
            heights = list(height) if isinstance(height, Sequence) else [height] * n
            queue: deque[int] = deque()
            texts: dict[int, str] = {}
            for i, item in enumerate(svgs):
                w = widths[i] if i < len(widths) else 0
                results[i], svg = self._precheck(item, w, heights[i] if i < len(heights) else 0)
                gt = gts[i] if results[i] is None and gts is not None and i < len(gts) else None
                if gt is not None and getattr(gt[1], "shape", None) != (int(heights[i]), int(w), 3):
                    results[i] = RenderResult(None, BAD_SIZE, "ground truth does not match the canvas")
                if results[i] is None:
                    queue.append(i)
                    texts[i] = svg
            if queue:
                with self._lock:
                    self._check_pid()
                    job = _Job(texts, widths, heights, list(gts) if gts is not None else [None] * n, score)
                    job.extras, job.image = extras, image
                    self._run(queue, job, results, timeout_s or self.timeout_s)
        except Exception as exc:
            for i in range(n):
                if results[i] is None:
                    results[i] = RenderResult(None, POOL_ERROR, f"{type(exc).__name__}: {exc}")
        with self._count_lock:
            self.counts.update("ok" if r.ok else str(r.reason) for r in results)
        return results  # type: ignore[return-value]

    def _precheck(self, item: Any, width: int, height: int) -> tuple[RenderResult | None, str]:
        """``(failure, "")`` when decided without a worker (no SVG, oversized text, invalid output size),
        else ``(None, svg)``. Linear in the text, which is capped first."""
        try:
            w, h = int(width), int(height)
        except (TypeError, ValueError):
            return RenderResult(None, BAD_SIZE, f"{width}x{height}"), ""
        if not (0 < w <= self.max_side and 0 < h <= self.max_side):
            return RenderResult(None, BAD_SIZE, f"{w}x{h} outside 1..{self.max_side}"), ""
        text = completion_text(item)
        if len(text) > 4 * self.limits.max_bytes:
            return RenderResult(None, TOO_LARGE, f"{len(text)} characters"), ""
        if declares_entities(text):  # checked on the whole text: extraction would drop the prolog
            return RenderResult(None, DTD, "DOCTYPE internal subsets and <!ENTITY> are forbidden"), ""
        svg, reason = find_svg(text)
        if svg is None:
            return RenderResult(None, reason), ""
        if len(svg) > self.limits.max_bytes:
            return RenderResult(None, TOO_LARGE, f"more than {self.limits.max_bytes} bytes"), ""
        return None, svg

    def _run(self, queue, job: _Job, results, timeout_s: float) -> None:
        start_failures = 0
        while queue or any(w.task for w in self._workers):
            self._fill()
            now = time.monotonic()
            for worker in self._workers:
                if worker.ready and worker.task is None and queue:
                    i = queue.popleft()
                    w, h = int(job.widths[i]), int(job.heights[i])
                    worker.task, worker.deadline = (i, w, h), now + timeout_s
                    header, body = job.request(i, w, h, worker)
                    if not worker.send(header, body):
                        results[i] = RenderResult(None, WORKER_CRASH, "worker pipe closed")
                        worker.task = None
                        self._drop(worker, kill=True)
                        break
            waits = [w.deadline - now for w in self._workers if w.task]
            waits += [w.started + self.start_timeout_s - now for w in self._workers if not w.ready]
            wait = min([0.5, *waits]) if waits else 0.5
            readable, _, _ = select.select([w.fd for w in self._workers], [], [], max(wait, 0.0))
            for worker in [w for w in self._workers if w.fd in readable]:
                alive = worker.read()
                try:
                    max_body = 3 * worker.task[1] * worker.task[2] if worker.task else 0
                    for header, body in worker.messages(max_body):
                        if header.get("ready"):
                            worker.ready, start_failures = True, 0
                        elif worker.task and header.get("id") == worker.task[0]:
                            if header.get("reason") == NEED_GT and worker.task[0] not in job.force_gt:
                                job.force_gt.add(worker.task[0])  # mirror out of step: resend with pixels
                                queue.appendleft(worker.task[0])
                                worker.task = None
                                continue
                            self._accept(worker, header, body, results)
                except (ValueError, KeyError, TypeError) as exc:  # protocol violation: treat as a crash
                    alive = False
                    if worker.task:
                        results[worker.task[0]] = RenderResult(None, WORKER_CRASH, f"bad reply: {exc}")
                        worker.task = None
                if not alive:
                    self._drop(worker, kill=True)  # also reaps it, so the exit status is known
                    code = worker.proc.returncode
                    if worker.task:
                        # SIGKILL without our doing is the kernel's OOM killer; other deaths (often SIGSEGV
                        # when a C library's allocation fails under RLIMIT_AS) stay "worker_crash".
                        reason = MEMORY if code == -9 else WORKER_CRASH
                        results[worker.task[0]] = RenderResult(
                            None, reason, f"worker exited with status {code}"
                        )
                        worker.task = None
                    elif not worker.ready:
                        start_failures += 1
                elif worker.task is None and (
                    worker.renders >= self.max_renders_per_worker or worker.recycle
                ):
                    self._drop(worker, kill=False)
            now = time.monotonic()
            for worker in list(self._workers):
                if worker.task and now > worker.deadline:
                    results[worker.task[0]] = RenderResult(
                        None, TIMEOUT, f"killed after {timeout_s:g} s", timeout_s
                    )
                    worker.task = None
                    self._drop(worker, kill=True)
                elif not worker.ready and now > worker.started + self.start_timeout_s:
                    start_failures += 1
                    self._drop(worker, kill=True)
            if start_failures >= 3 and not any(w.ready for w in self._workers):
                for i in queue:
                    results[i] = RenderResult(None, POOL_ERROR, "render workers fail to start")
                queue.clear()
                for worker in list(self._workers):
                    if worker.task:
                        results[worker.task[0]] = RenderResult(
                            None, POOL_ERROR, "render workers fail to start"
                        )
                        worker.task = None
                return

    def _accept(self, worker: _Worker, header: dict, body: bytes, results: list) -> None:
        i, w, h = worker.task
        worker.task = None
        worker.renders += 1
        if header.get("retire"):
            worker.recycle = True
        seconds = float(header.get("seconds") or 0.0)
        reason = header.get("reason")
        scores = header.get("scores")
        if reason is None and isinstance(scores, dict):
            image = np.frombuffer(body, np.uint8).reshape(h, w, 3).copy() if len(body) == w * h * 3 else None
            values = {str(k): float(v) for k, v in scores.items() if isinstance(v, (int, float))}
            results[i] = RenderResult(image, None, "", seconds, values)
        elif reason is None and len(body) == w * h * 3:
            image = np.frombuffer(body, np.uint8).reshape(h, w, 3).copy()
            results[i] = RenderResult(image, None, "", seconds)
        else:
            results[i] = RenderResult(
                None, str(reason or RENDER_ERROR), str(header.get("detail") or "")[:300], seconds
            )


class _Job:
    """One batch as the dispatch loop sees it: texts, sizes and (optionally) ground truths to score against."""

    def __init__(self, texts, widths, heights, gts, score) -> None:
        self.texts, self.widths, self.heights, self.gts, self.score = texts, widths, heights, gts, score
        self.extras, self.image, self.force_gt = False, False, set()

    def request(self, i: int, w: int, h: int, worker: _Worker) -> tuple[dict[str, Any], bytes]:
        header: dict[str, Any] = {"id": i, "w": w, "h": h}
        svg = self.texts[i].encode("utf-8", "replace")
        gt = self.gts[i] if i < len(self.gts) else None
        if self.score is None or gt is None:
            return header, svg
        key, image = gt  # shapes were checked in render_many
        pixels = worker.gt_pixels(str(key), image, i in self.force_gt)
        header |= {"score": self.score, "gt": str(key), "gt_len": len(pixels), "extras": self.extras}
        return header | {"image": self.image}, pixels + svg


# ----------------------------------------------------------------------------------------------- default pool

_DEFAULT: RenderPool | None = None
_DEFAULT_KWARGS: dict[str, Any] = {}
_DEFAULT_LOCK = threading.Lock()


def configure_default_pool(**kwargs: Any) -> None:
    """Set :class:`RenderPool` arguments for the default pool (closing the current one)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is not None:
            _DEFAULT.close()
        _DEFAULT = None
        _DEFAULT_KWARGS.clear()
        _DEFAULT_KWARGS.update(kwargs)


def default_pool() -> RenderPool:
    """The process-wide pool, created on first use (workers: ``$R1VISION_SVG_WORKERS`` or 2), closed at exit."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            kwargs = dict(_DEFAULT_KWARGS)
            kwargs.setdefault("workers", int(os.environ.get("R1VISION_SVG_WORKERS", "2")))
            _DEFAULT = RenderPool(**kwargs)
        return _DEFAULT


def shutdown_default_pool() -> None:
    """Stop the default pool's workers (registered with ``atexit``)."""
    with _DEFAULT_LOCK:
        if _DEFAULT is not None:
            _DEFAULT.close()


atexit.register(shutdown_default_pool)


def render(
    svg: Any, width: int, height: int, *, pool: RenderPool | None = None, timeout_s: float | None = None
) -> RenderResult:
    """Render ``svg`` (an SVG string or a completion containing one) to RGB ``(height, width, 3)`` uint8 on
    white, in the sandbox. Never raises: failures come back as ``RenderResult(None, reason)``."""
    return (pool or default_pool()).render(svg, width, height, timeout_s)


def render_many(
    svgs: Sequence[Any],
    width: int | Sequence[int],
    height: int | Sequence[int],
    *,
    pool: RenderPool | None = None,
    timeout_s: float | None = None,
) -> list[RenderResult]:
    """Render a batch spread over the pool's workers; see :func:`render`."""
    return (pool or default_pool()).render_many(svgs, width, height, timeout_s)
