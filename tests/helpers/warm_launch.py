"""A warm launcher for the tests: launched commands start from an interpreter that has already imported
torch, transformers, TRL, DeepSpeed and r1vision, forked instead of exec'd.

Why: a 2-process ``accelerate launch`` on this 2-core machine spends ~9 s wall (~16 CPU-s) importing before
a rank does any work, and the slow lane launches dozens. Only the exec is replaced; everything a user's
launch runs still runs: ``python -m accelerate.commands.launch`` parses its flags and prepares each rank's
environment, torch elastic's agent rendezvouses, starts, watches and stops the ranks, and each rank runs
``python -m r1vision.cli ...`` (or the test's script) from its ``__main__`` with its own environment, working
directory, ``sys.path`` (``PYTHONPATH``, a ``sitecustomize`` on it), output files, session and exit code.
The one hook is torch elastic's ``SubprocessHandler._popen``, which forks a rank from the warm launcher.

Differences from a cold start, and why they do not matter here: modules imported before the fork were
imported under the session's environment, so a library variable read once at import (``OMP_NUM_THREADS``,
``HF_HUB_OFFLINE``, ``TRACKIO_DIR``: ``IMPORT_TIME_PREFIXES`` in :mod:`tests.helpers.warm_client`) must be
the server's; a request that changes one runs cold. The forked processes share the server's hash seed (r1vision seeds every random
generator it uses). Tests that must show the real exec path (one per layout) pass ``cold=True``;
``R1VISION_COLD_LAUNCH=1`` runs every launch cold.

Protocol (:mod:`tests.helpers.warm_client`): one Unix-socket connection per command. The client sends
``{"argv", "env", "cwd", "executable"}`` (JSON after its 8-byte length) and the file descriptors for stdout,
stderr (and stdin); the server forks a handler that forks the command's process in a new session and
answers ``{"returncode"}``; the server accepts the next connection meanwhile, so a warm command can run a
warm one. A client that goes away (its timeout, a kill) makes the handler stop the command's session.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from r1vision.cli import _quiet_deepspeed_on_cpu
from tests.helpers.warm_client import (
    PYTHON_LOG,
    SETTINGS,
    args_refusal,
    env_refusal,
    request,
    wait_for_socket,
)

WARM_MODULES = ("torch", "torch.distributed.run", "transformers", "trl", "peft", "datasets", "accelerate",
                "accelerate.utils", "accelerate.commands.config", "deepspeed", "diffusers",
                "r1vision.runners.train", "r1vision.trainer.grpo", "r1vision.trainer.sft",
                "r1vision.runners.t2i")  # fmt: skip
# The server's own sys.path without its script folder and its PYTHONPATH: a child adds its own.
_BASE_PATH = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
_LISTENING: list[socket.socket] = []  # the server's socket, closed in every child


# --- running ``python [-u] (-m MODULE | SCRIPT) ARGS`` in this process, as the interpreter would ---------


def _streams(unbuffered: bool) -> None:
    """Fresh ``sys.stdout``/``sys.stderr`` on fds 1 and 2 (the parent's objects hold its own buffers)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace" if fd == 2 else "strict",
                                  line_buffering=True, write_through=unbuffered or fd == 2)  # fmt: skip
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_python(args: list[str], env: dict[str, str]) -> int:
    """Run the interpreter arguments ``args`` (``-m MODULE``, ``-c CODE`` or ``SCRIPT``, then its own) here with
    environment ``env``; returns the exit code."""
    unbuffered = False
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        unbuffered |= args[0] == "-u"
        args = args[1:]
    os.environ.clear()
    os.environ.update(env)
    _streams(unbuffered or bool(env.get("PYTHONUNBUFFERED")))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = {"-m": os.getcwd(), "-c": ""}.get(args[0]) or str(Path(args[0]).resolve().parent)
    sys.path[:] = [first, *extra, *_BASE_PATH]
    atexit._clear()  # the server's handlers are not this command's
    code = 0
    try:
        if any((Path(p) / "sitecustomize.py").is_file() for p in extra):
            sys.modules.pop("sitecustomize", None)
            __import__("sitecustomize")  # what site.py does at interpreter start
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]  # runpy puts the module's path in argv[0]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = list(args)
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    try:  # interpreter shutdown: join non-daemon threads, then atexit
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed pipe at exit
                pass
    return code


def _child(
    args: list[str], env: dict[str, str], fds: tuple[int | None, ...], executable: str | None = None
) -> None:
    """In a freshly forked process: the command's own session, files (stdout, stderr[, stdin]), interpreter
    path (the client's ``python`` shim, so that what the command starts with ``sys.executable`` is warm too)
    and exit; never returns."""
    code = 1
    try:
        for sock in _LISTENING:
            sock.close()
        os.setsid()
        for target, fd in zip((1, 2, 0), fds, strict=False):
            if fd is not None:
                os.dup2(fd, target)
        if executable:
            sys.executable = executable
        code = run_python(args, env)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(code)


class ForkedProcess:
    """The part of ``subprocess.Popen`` torch elastic uses on Linux (``pid``, ``poll``, ``wait``; it stops
    a rank with ``os.killpg``), for a rank forked from this interpreter."""

    def __init__(self, args: list[str], env: dict[str, str], stdout=None, stderr=None) -> None:
        self.args = args
        self.returncode: int | None = None
        fds = tuple(f.fileno() if f is not None else None for f in (stdout, stderr))
        self.pid = os.fork()
        if self.pid == 0:
            _child(args[1:], env, fds)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode


def _warm_popen_hook() -> None:
    """Ranks that ``python`` would run are forked from here; anything else is exec'd as before."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as sh

    exec_popen = sh.SubprocessHandler._popen

    def _popen(self, args, env):
        if args and args[0] == sys.executable and len(args) > 1:
            return ForkedProcess(list(args), env, self._stdout, self._stderr)
        return exec_popen(self, args, env)

    sh.SubprocessHandler._popen = _popen


# --- the server ----------------------------------------------------------------------------------------


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request: an 8-byte length, then that many bytes of JSON; the fds (stdout, stderr[, stdin]) come
    with the first bytes."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "big"):
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("the client went away in the middle of its request")
        data += more
    return json.loads(data[8:].decode()), list(fds)


def _stop_session(pid: int) -> None:
    """SIGTERM to the command's session (the launcher stops its ranks), SIGKILL after 30 s; reap it."""
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.1)
    os.waitpid(pid, 0)


def _serve_one(conn: socket.socket) -> None:
    request, fds = _recv_request(conn)
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.chdir(request["cwd"])
        _child(request["argv"][1:], request["env"], tuple(fds), request.get("executable"))
    for fd in fds:
        os.close(fd)
    # The command's end; a signal the client forwards (a byte: its number); or the client's end (a timeout,
    # a kill): then stop the command's session.
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            return
        readable, _, _ = select.select([conn], [], [], 0.05)
        if not readable:
            continue
        signals = conn.recv(64)
        if not signals:
            _stop_session(pid)
            return
        for signum in signals:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)


def serve(path: str) -> None:
    """Import the heavy modules, then fork one child per connection on the Unix socket ``path``."""
    _quiet_deepspeed_on_cpu()  # what every `r1vision` command does before DeepSpeed loads
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra not installed: a command needing it imports it itself
            pass
    _warm_popen_hook()
    parent = os.getppid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        _LISTENING.append(server)
        server.bind(path + ".tmp")
        os.rename(path + ".tmp", path)  # the client connects once the imports are done
        server.listen(4)
        server.settimeout(1.0)
        while os.getppid() == parent:  # the test process went away: so do we
            try:
                conn, _ = server.accept()
            except TimeoutError:
                _reap_handlers()
                continue
            # Each connection gets a handler process that forks the command and waits for it, so the server
            # accepts the next one at once: a warm command may itself run the `python` shim.
            with conn:
                if os.fork() == 0:
                    code = 0
                    try:
                        server.close()
                        conn.settimeout(None)
                        _serve_one(conn)
                    except Exception:  # noqa: BLE001 - one bad request must not end the server
                        traceback.print_exc()
                        code = 1
                    finally:
                        os._exit(code)
            _reap_handlers()


def _reap_handlers() -> None:
    """Collect the handlers that have finished (the server's only children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


# --- the client (the pytest process) -------------------------------------------------------------------


class WarmLauncher:
    """Starts the server on first use; :meth:`run` is ``subprocess.run(capture_output=True, text=True)``;
    :attr:`python` is ``python`` for programs a test runs (:mod:`tests.helpers.warm_client`)."""

    def __init__(self, base_env: dict[str, str]) -> None:
        self.base_env = dict(base_env)
        self.dir = tempfile.mkdtemp(prefix="r1v-warm-")
        self.path = os.path.join(self.dir, "sock")
        root = Path(__file__).resolve().parents[2]
        self.python = os.path.join(self.dir, "python")
        client = Path(__file__).with_name("warm_client.py")
        # -I -S: the client needs the standard library only, and starts in ~20 ms
        Path(self.python).write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -I -S "{client}" "{self.dir}" "$@"\n'
        )
        os.chmod(self.python, 0o755)
        self.log = open(os.path.join(self.dir, "server.log"), "w")  # noqa: SIM115 - open for the server's life
        self.server = subprocess.Popen([sys.executable, "-m", "tests.helpers.warm_launch", self.path],
                                       cwd=root, env=self.base_env, stdout=self.log, stderr=subprocess.STDOUT)  # fmt: skip
        settings = {
            "python": sys.executable,
            "socket": self.path,
            "env": self.base_env,
            "server": self.server.pid,
        }
        Path(self.dir, SETTINGS).write_text(json.dumps(settings))
        atexit.register(self.close)

    def refusal(self, cmd: list[str], env: dict[str, str]) -> str | None:
        """Why ``cmd`` cannot start warm (``None``: it can): another program, interpreter arguments the server
        does not run, or another import-time environment than the server's."""
        if len(cmd) < 2 or cmd[0] not in (sys.executable, self.python):
            return "not this interpreter"
        if self.server.poll() is not None:
            return "the server exited"
        return args_refusal(cmd[1:]) or env_refusal(env, self.base_env)

    def accepts(self, cmd: list[str], env: dict[str, str]) -> bool:
        """Whether ``cmd`` can start warm (:meth:`refusal` has no reason)."""
        return self.refusal(cmd, env) is None

    def python_launches(self) -> list[str]:
        """What the ``python`` shim did so far, a line per command: ``warm`` or ``cold (why)``."""
        log = Path(self.dir, PYTHON_LOG)
        return log.read_text().splitlines() if log.is_file() else []

    def run(
        self, cmd: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        start = time.monotonic()
        if not wait_for_socket(self.path, lambda: self.server.poll() is None, timeout=120.0):
            raise RuntimeError(f"the warm launcher did not start; see {self.log.name}")
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            # a command given as the shim (`warm_python()`) gets it as its sys.executable, as the shim would
            executable = self.python if cmd[0] == self.python else None
            code = request(self.path, [str(a) for a in cmd], env, str(cwd), [out.fileno(), err.fileno()],
                           timeout - (time.monotonic() - start), executable)  # fmt: skip
            texts = []
            for f in (out, err):
                f.seek(0)
                texts.append(f.read().decode("utf-8", errors="replace"))
        if code is None:
            raise subprocess.TimeoutExpired(cmd, timeout, output=texts[0], stderr=texts[1])
        return subprocess.CompletedProcess(cmd, code, texts[0], texts[1])

    def close(self) -> None:
        if self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1])
