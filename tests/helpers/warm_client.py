"""The client side of the warm launcher (:mod:`tests.helpers.warm_launch`), standard library only: which
commands can start warm, the request, and ``python`` for programs a test runs.

``WarmLauncher.python`` is a two-line shell script that runs this module as ``python``: a test gives it as
``PYTHON`` to a shipped script (``scripts/gpu_check.sh``, the launchers under ``scripts/``), and every
``"$PYTHON" ...`` there, and every ``sys.executable ...`` in what that starts, forks from the warm server
instead of importing torch again. What it cannot run warm (another environment at import time, interpreter
flags other than ``-u``/``-B``, no program) it execs on the real interpreter, as ``python`` would. It exits
as its command did, passes the signals it receives on (:data:`FORWARDED`), and a killed shim's command is
stopped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

# The variables of the libraries the server imports, several read once at import (OMP_NUM_THREADS by
# libgomp, HF_HUB_OFFLINE by huggingface_hub, TRACKIO_DIR by trackio): a launch whose value of any of them
# differs from the server's runs cold. Not DS_ACCELERATOR (the server sets it as `r1vision` does, see
# serve), nor READ_WHEN_USED: read when used, and left set in the test process by accelerate's CUDA probe.
IMPORT_TIME_PREFIXES = ("OMP_", "MKL_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH_",
                        "PYTORCH_", "CUDA_", "DEEPSPEED_", "TRACKIO_", "WANDB_", "DIFFUSERS_", "TRL_")  # fmt: skip
READ_WHEN_USED = frozenset({"PYTORCH_NVML_BASED_CUDA_CHECK"})
SETTINGS = "server.json"  # in the launcher's folder: the real interpreter, the socket, the server's env
PYTHON_LOG = "python.log"  # one line per command the shim ran: "warm" or "cold (why)"


def env_refusal(env: dict[str, str], base_env: dict[str, str]) -> str | None:
    """Why a command with environment ``env`` cannot fork from a server imported under ``base_env``."""
    differ = sorted(
        k
        for k in {*env, *base_env}
        if k.startswith(IMPORT_TIME_PREFIXES) and k not in READ_WHEN_USED and env.get(k) != base_env.get(k)
    )
    return f"{differ[0]} differs" if differ else None


def args_refusal(args: list[str]) -> str | None:
    """Why the interpreter arguments ``args`` cannot run warm: the server runs ``[-u] [-B] (-m MODULE | -c
    CODE | SCRIPT) ...`` only."""
    rest = list(args)
    while rest and rest[0] in ("-u", "-B"):
        rest = rest[1:]
    if not rest or rest[0] == "-" or (rest[0].startswith("-") and rest[0] not in ("-m", "-c")):
        return f"interpreter arguments {' '.join(args[:2]) or '(none)'}"
    if rest[0] in ("-m", "-c") and len(rest) < 2:
        return f"{rest[0]} without its argument"
    return None


# What the shim passes on to its command, as a process receiving them would get them (Slurm's preemption
# SIGTERM, Ctrl-C, a user's SIGUSR1); SIGKILL cannot be caught: the server then stops the command's session.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def request(
    path: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    fds: list[int],
    timeout: float | None,
    executable: str | None = None,
    forward_signals: bool = False,
) -> int | None:
    """Run ``argv`` on the server at socket ``path`` with ``fds`` (stdout, stderr[, stdin]); its exit code, or
    ``None`` after ``timeout`` seconds (closing the connection stops the command's session).
    ``forward_signals``: the :data:`FORWARDED` signals this process receives go to the command."""
    start = time.monotonic()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        sock.connect(path)
        body = json.dumps({"argv": argv, "env": env, "cwd": cwd, "executable": executable}).encode()
        socket.send_fds(sock, [len(body).to_bytes(8, "big") + body], fds)
        if forward_signals:
            for signum in FORWARDED:
                signal.signal(signum, lambda n, _frame: sock.send(bytes([n])))
        sock.settimeout(None if timeout is None else max(timeout - (time.monotonic() - start), 1.0))
        try:
            reply = sock.recv(1 << 16)
        except TimeoutError:
            return None
    if not reply:
        raise ConnectionError("the warm launcher closed the connection without an exit code")
    return json.loads(reply)["returncode"]


def wait_for_socket(path: str, alive: Callable[[], bool], timeout: float) -> bool:
    """Wait for the server's socket ``path`` (it appears once the imports are done) while ``alive()``."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if not alive() or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(folder: str, args: list[str]) -> None:
    """``python ARGS`` through the server whose folder is ``folder``; exits as the command did."""
    with open(os.path.join(folder, SETTINGS)) as f:
        settings = json.load(f)
    env = dict(os.environ)
    why = args_refusal(args) or env_refusal(env, settings["env"])
    if why is None and not wait_for_socket(settings["socket"], lambda: _running(settings["server"]), 120.0):
        why = "the server is not running"
    with open(os.path.join(folder, PYTHON_LOG), "a") as log:
        log.write(f"cold ({why})\n" if why else "warm\n")
    if why:
        os.execv(settings["python"], [settings["python"], *args])
    shim = os.path.join(folder, "python")
    code = request(
        settings["socket"], [shim, *args], env, os.getcwd(), [1, 2, 0], None, shim, forward_signals=True
    )
    if code is not None and code < 0:  # killed by a signal: die of it, as the command did
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
