"""Launched workers end when their launcher dies.

``torchrun`` / ``accelerate launch`` start one process per rank. Killed with SIGKILL (an OOM kill, ``kill -9``,
a scheduler's hard stop), the launcher cannot pass the signal on, and its workers live on as orphans holding
GPU memory, ports and half-written outputs. A launched worker therefore watches its parent: when the parent
changes (the worker was re-parented), the worker terminates itself. Polling ``os.getppid`` is portable and,
unlike ``PR_SET_PDEATHSIG``, does not fire when merely the launcher *thread* that started the worker ends.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

logger = logging.getLogger(__name__)

# Set by torchrun (and so by accelerate launch) in every worker it starts.
LAUNCHER_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")
_GRACE_S = 10.0
_started = False


def launched() -> bool:
    """Whether this process was started by a torchrun-style launcher."""
    return any(os.environ.get(name) for name in LAUNCHER_ENV)


def watch_parent(interval_s: float = 1.0) -> bool:
    """Start (once per process) a daemon thread that ends the process when its parent dies: SIGTERM to
    itself (so handlers such as an inference engine's shutdown run), then a hard exit after 10 s. Returns
    whether a watcher runs."""
    global _started
    if _started or os.name != "posix":
        return _started
    parent = os.getppid()
    if parent == 1:  # already orphaned, or started by init: nothing to watch
        return False

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        logger.warning("the launcher (pid %d) is gone; this worker (pid %d) stops", parent, os.getpid())
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_GRACE_S)
        os._exit(143)

    threading.Thread(target=watch, name="r1vision-parent-watch", daemon=True).start()
    _started = True
    return True
