"""Running math-verify under a hard deadline in any thread, process or dataloader worker.

Why a persistent subprocess and not the alternatives:

- ``signal.alarm`` (math-verify's own timeout) only works in the main thread of the main interpreter, and
  a signal handler cannot interrupt a long C-level operation such as a huge integer power anyway.
- A thread with a deadline can stop *waiting* but cannot stop the work: a sympy call on
  ``9^{9^{9^{9}}}`` keeps burning a core (and holding the GIL) forever.
- ``multiprocessing`` pools cannot be started from daemonic processes such as DataLoader workers.

So each process that verifies answers lazily starts a small pool of ``python -c`` worker subprocesses
(``subprocess.Popen`` works everywhere, including daemonic processes) that import math-verify once and
answer JSON lines. The caller waits with ``select`` up to the deadline; on timeout the worker is killed
(SIGKILL) and replaced on the next call. Workers exit by themselves when their stdin closes, so they die
with the parent. A forked child never reuses the parent's workers (they are keyed by pid).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time

# The worker runs in a bare interpreter: it must not import r1vision (slow, and may not be on sys.path).
_WORKER_SOURCE = r"""
import json, sys, os
os.environ.setdefault("OMP_NUM_THREADS", "1")
import logging
logging.disable(logging.CRITICAL)
from math_verify import parse, verify
parse("$1$", parsing_timeout=None)  # warm the lazy LaTeX-parser imports before reporting ready
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    try:
        gold, pred = json.loads(line)
        g = parse(gold, parsing_timeout=None)
        p = parse(pred, parsing_timeout=None)
        ok = bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))
    except BaseException:
        ok = False
    sys.stdout.write("1\n" if ok else "0\n"); sys.stdout.flush()
"""

STARTUP_TIMEOUT_S = 60.0


class WorkerUnavailable(RuntimeError):
    """The math-verify worker could not be started (math-verify missing or the interpreter failing)."""


class _Worker:
    """One math-verify subprocess with a line protocol."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._buffer = b""
        if self._read_line(time.monotonic() + STARTUP_TIMEOUT_S) != "ready":
            self.kill()
            raise WorkerUnavailable("math-verify worker did not start (is math-verify installed?)")

    def _read_line(self, deadline: float) -> str | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:  # the worker died
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("ascii", "replace").strip()

    def ask(self, gold: str, pred: str, timeout: float) -> bool | None:
        """True/False from math-verify, or None on timeout or a dead worker (the caller then kills it)."""
        try:
            self.proc.stdin.write((json.dumps([gold, pred]) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return None
        reply = self._read_line(time.monotonic() + timeout)
        return None if reply is None else reply == "1"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class MathVerifyPool:
    """Thread-safe pool of math-verify workers; ``size`` calls can run at once."""

    def __init__(self, size: int = 2) -> None:
        self.size = max(1, size)
        self._pid = os.getpid()
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._slots = threading.Semaphore(self.size)
        self._lock = threading.Lock()
        self._all: list[_Worker] = []
        self._pending = 0  # background starts in flight
        self.timeouts = 0

    def verify(self, gold: str, pred: str, timeout: float) -> bool:
        """math-verify's ``verify(parse(gold), parse(pred))`` with a hard deadline; False on timeout."""
        with self._slots:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                worker = self._wait_for_respawn() or self._spawn()
            if not worker.alive():
                self._discard(worker)
                worker = self._spawn()
            result = worker.ask(gold, pred, timeout)
            if result is None:
                self.timeouts += 1
                self._discard(worker)  # stuck or dead: kill it
                self._respawn_in_background()  # so that the next call finds a warm worker
                return False
            self._idle.put(worker)
            return result

    def _respawn_in_background(self) -> None:
        """Start a replacement worker in a daemon thread (a start takes ~1 s of imports)."""

        def spawn() -> None:
            try:
                worker = self._spawn()
            except (WorkerUnavailable, OSError):
                return
            finally:
                with self._lock:
                    self._pending -= 1
            if os.getpid() == self._pid and self._idle.qsize() < self.size:
                self._idle.put(worker)
            else:  # a caller started one meanwhile: keep the pool at its size
                self._discard(worker)

        with self._lock:
            self._pending += 1
        threading.Thread(target=spawn, name="math-verify-respawn", daemon=True).start()

    def _wait_for_respawn(self) -> _Worker | None:
        """The replacement being started in the background, rather than a second start competing with it."""
        with self._lock:
            pending = self._pending
        if not pending:
            return None
        try:
            return self._idle.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            return None

    def warm(self) -> int:
        """Number of idle, live workers (started and ready)."""
        return sum(1 for w in list(self._idle.queue) if w.alive())

    def _spawn(self) -> _Worker:
        worker = _Worker()
        with self._lock:
            self._all.append(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def close(self) -> None:
        """Kill every worker (only in the process that started them)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.kill()
        self._idle = queue.LifoQueue()


_POOL: MathVerifyPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool() -> MathVerifyPool:
    """This process's pool (a fresh one after ``fork``); size from ``R1VISION_VERIFY_WORKERS`` (default 2)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._pid != os.getpid():
            # After fork the parent's workers belong to the parent: never talk to or kill them here.
            _POOL = MathVerifyPool(int(os.environ.get("R1VISION_VERIFY_WORKERS", "2")))
        return _POOL


def _reset_after_fork() -> None:
    # A lock held by another thread at fork time would deadlock the child forever.
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _close_at_exit() -> None:
    if _POOL is not None:
        _POOL.close()


atexit.register(_close_at_exit)
