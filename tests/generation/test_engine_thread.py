"""The per-rank server drives its engine from the one thread that built it, whichever thread a request
arrives on (FastAPI runs blocking handlers in a pool); exceptions come back to the caller."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from r1vision.generation.vllm_server import EngineThread


def test_every_call_runs_on_the_building_thread():
    engine = EngineThread()
    built_on = engine.run(threading.get_ident)
    with ThreadPoolExecutor(max_workers=4) as pool:  # as FastAPI's worker threads would call
        seen = set(pool.map(lambda _: engine.run(threading.get_ident), range(16)))
    assert seen == {built_on} and engine.ident == built_on != threading.get_ident()


def test_errors_reach_the_caller():
    engine = EngineThread()
    with pytest.raises(ValueError, match="bad chunk"):
        engine.run(lambda: (_ for _ in ()).throw(ValueError("bad chunk")))
    assert engine.run(lambda: 3) == 3  # the thread survives
