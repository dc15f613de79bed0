"""The worker side of the SVG sandbox: runs in a fresh interpreter started by :class:`.render.RenderPool`.

Only this module, ``sanitize.py``, ``extract.py`` and ``score.py`` are loaded there (as a private package),
so a worker starts in well under a second and never imports r1vision, transformers or torch. Requests and
replies are length-framed JSON plus raw pixels on stdin/stdout.

A request may ask the worker to *score* the rendering against a ground truth instead of returning pixels:
the reward terms are then computed here, in parallel across workers, and only numbers travel back. Ground
truths are cached per worker by key (an LRU of ``GT_CACHE`` entries the parent mirrors, so it sends a
ground truth's pixels only to a worker that lacks them; a miss is answered ``need_gt`` and resent).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from typing import Any

import numpy as np

from .sanitize import TOO_LARGE, SanitizeLimits, sanitize
from .score import evaluation_metrics, prepare, score

TIMEOUT = "timeout"
MEMORY = "memory"
RENDER_ERROR = "render_error"
WORKER_CRASH = "worker_crash"
POOL_ERROR = "pool_error"
BAD_SIZE = "bad_size"
BLANK = "blank"
NEED_GT = "need_gt"
GT_CACHE = 32  # ground truths a worker keeps prepared (~2.5 MB each at 512 px; the parent mirrors the LRU)

_FRAME = struct.Struct(">II")  # header length, body length
_MAX_HEADER = 1 << 16


def _frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return _FRAME.pack(len(head), len(body)) + head + body


def _refuse_non_data(url: str, resource_type: str) -> bytes:
    """CairoSVG ``url_fetcher``: decode ``data:`` URIs, refuse every other URL (files, http, relative)."""
    if isinstance(url, str) and url[:5].lower() == "data:":
        from urllib.request import urlopen

        with urlopen(url) as response:  # urllib's data: handler decodes in memory, no I/O
            return response.read()
    raise ValueError(f"external resource refused: {str(url)[:80]}")


def _read_exact(stream, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _limit_worker(memory_mb: int) -> None:
    import resource
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    try:  # die with the parent even if it is SIGKILLed mid-render (Linux only)
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (3600, 3600))
    baseline = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    baseline = int(line.split()[1]) * 1024
    except OSError:
        baseline = 512 << 20
    limit = baseline + memory_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _rgb_of(bgra: np.ndarray) -> np.ndarray:
    """RGB ``uint8`` of cairo's ARGB32 pixels (BGRA in memory, little endian), one channel at a time: a
    single reversed-channel copy (``bgra[..., 2::-1]``) takes ~5x as long at 512 px."""
    rgb = np.empty((*bgra.shape[:2], 3), np.uint8)
    rgb[..., 0] = bgra[..., 2]
    rgb[..., 1] = bgra[..., 1]
    rgb[..., 2] = bgra[..., 0]
    return rgb


def _render_in_worker(
    text: str, width: int, height: int, limits: SanitizeLimits
) -> tuple[dict, np.ndarray | None]:
    from cairosvg.parser import Tree
    from cairosvg.surface import PNGSurface

    checked = sanitize(text, limits)
    if not checked.ok:
        return {"reason": checked.reason, "detail": checked.detail}, None
    try:
        tree = Tree(
            bytestring=checked.svg.encode("utf-8", "replace"), unsafe=False, url_fetcher=_refuse_non_data
        )
        surface = PNGSurface(
            tree, None, 96, output_width=width, output_height=height, background_color="white"
        )
        surface.cairo.flush()
        h, w, stride = surface.cairo.get_height(), surface.cairo.get_width(), surface.cairo.get_stride()
        bgra = (
            np.frombuffer(surface.cairo.get_data(), np.uint8).reshape(h, stride)[:, : w * 4].reshape(h, w, 4)
        )
        if (h, w) != (height, width):
            return {"reason": RENDER_ERROR, "detail": f"surface is {w}x{h}"}, None
        return {"reason": None}, _rgb_of(bgra)
    except MemoryError:
        return {"reason": MEMORY, "detail": "MemoryError", "retire": True}, None
    except RecursionError:
        return {"reason": TOO_LARGE, "detail": "recursion limit"}, None
    except Exception as exc:
        detail = f"{type(exc).__name__}: {str(exc)[:160]}"
        if "NO_MEMORY" in detail or "memory" in detail.lower():
            return {"reason": MEMORY, "detail": detail, "retire": True}, None
        return {"reason": RENDER_ERROR, "detail": detail}, None


class _GroundTruths:
    """The worker's LRU of prepared ground truths (same eviction order as the parent's mirror)."""

    def __init__(self) -> None:
        from collections import OrderedDict

        self.items: OrderedDict[str, tuple[np.ndarray, Any]] = OrderedDict()

    def get(self, request: dict, pixels: bytes, config: dict) -> tuple[np.ndarray, Any] | None:
        key = str(request["gt"])
        if pixels:
            h, w = int(request["h"]), int(request["w"])
            gt = np.frombuffer(pixels, np.uint8).reshape(h, w, 3)
            self.items[key] = (gt, prepare(gt, config))
            while len(self.items) > GT_CACHE:
                self.items.popitem(last=False)
        elif key in self.items:
            self.items.move_to_end(key)
        return self.items.get(key)


def _handle(request: dict, body: bytes, limits: SanitizeLimits, gts: _GroundTruths) -> tuple[dict, bytes]:
    """Render (and, when asked, score) one request."""
    w, h = int(request["w"]), int(request["h"])
    gt_len = int(request.get("gt_len") or 0)
    config = request.get("score")
    if config is not None:
        entry = gts.get(request, body[:gt_len], config)
        if entry is None:
            return {"reason": NEED_GT}, b""
    reply, pred = _render_in_worker(body[gt_len:].decode("utf-8", "replace"), w, h, limits)
    if pred is None:
        return reply, b""
    if config is None:
        return reply, pred.tobytes()
    scores = score(entry[1], pred, config)
    if request.get("extras"):
        scores |= evaluation_metrics(entry[0], pred)
    reply["scores"] = scores
    return reply, pred.tobytes() if request.get("image") else b""


def _worker_main() -> None:
    """Entry point of a worker process: read framed requests on stdin, write framed replies on stdout."""
    config = json.loads(sys.argv[1])
    limits = SanitizeLimits(**config["limits"])
    import cairosvg.parser  # noqa: F401  (import before the memory limit is measured)
    import cairosvg.surface  # noqa: F401
    import scipy.ndimage  # noqa: F401

    _limit_worker(int(config["memory_mb"]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(_frame({"ready": True, "pid": os.getpid()}))
    stdout.flush()
    gts = _GroundTruths()
    while True:
        head = _read_exact(stdin, _FRAME.size)
        if head is None:
            return
        header_len, body_len = _FRAME.unpack(head)
        request = json.loads(_read_exact(stdin, header_len) or b"{}")
        body = _read_exact(stdin, body_len) or b""
        start = time.perf_counter()
        try:
            reply, pixels = _handle(request, body, limits, gts)
        except MemoryError:
            reply, pixels = {"reason": MEMORY, "detail": "MemoryError", "retire": True}, b""
        except Exception as exc:  # a malformed request or a scoring error must not kill the worker
            reply, pixels = {"reason": RENDER_ERROR, "detail": f"{type(exc).__name__}: {str(exc)[:160]}"}, b""
        reply["id"] = request["id"]
        reply["seconds"] = time.perf_counter() - start
        stdout.write(_frame(reply, pixels))
        stdout.flush()
