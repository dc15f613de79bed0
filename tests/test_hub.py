"""``r1vision.hub.lookup``: one request to a Hub endpoint (a local HTTP server here) answers found, missing,
unreachable or unknown; a cached copy and offline mode send none."""

from __future__ import annotations

import socket
import time

import pytest

from r1vision import hub
from r1vision.trainer.distributed import _free_port


def test_found_missing_private_and_server_error(fake_hub, monkeypatch):
    assert hub.lookup("org/there").status == "found"
    assert hub.lookup("org/data", "dataset").status == "found"
    assert hub.lookup("org/there", "dataset").status == "missing"  # a model id is not a dataset
    assert hub.lookup("org/typo").status == "missing"
    assert hub.lookup("org/private").status == "missing"
    assert hub.lookup("org/broken").status == "unknown"  # left to the library
    monkeypatch.setenv("HF_TOKEN", "secret")
    assert hub.lookup("org/private").status == "found"
    assert fake_hub.seen[-1] == ("/api/models/org/private", "Bearer secret")


def test_a_token_file_is_used(fake_hub, tmp_path):
    (tmp_path / "hf_home").mkdir()
    (tmp_path / "hf_home" / "token").write_text("secret\n")
    assert hub.lookup("org/private").token and hub.lookup("org/private").status == "found"


def test_cached_and_offline_send_no_request(fake_hub, monkeypatch, tmp_path):
    (tmp_path / "hf_home" / "hub" / "models--org--typo").mkdir(parents=True)
    (tmp_path / "hf_home" / "datasets" / "org___gone").mkdir(parents=True)
    assert hub.lookup("org/typo").status == "cached"
    assert hub.lookup("org/gone", "dataset").status == "cached"
    monkeypatch.setenv("R1VISION_HUB_CHECK", "0")  # the user's switch: left to the library
    assert hub.lookup("org/anything").status == "unknown"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.lookup("org/anything").status == "offline"
    assert fake_hub.seen == []


def test_no_connection_is_unreachable_at_once(monkeypatch):
    for name in hub.OFFLINE_VARS:
        monkeypatch.delenv(name, raising=False)
    port = _free_port()  # nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    start = time.perf_counter()
    found = hub.lookup("org/model")
    assert found.status == "unreachable" and "refused" in found.detail.lower()
    assert time.perf_counter() - start < 2.0  # one attempt, no retries


def test_a_silent_endpoint_times_out_after_the_limit(monkeypatch):
    for name in hub.OFFLINE_VARS:
        monkeypatch.delenv(name, raising=False)
    quiet = socket.socket()
    quiet.bind(("127.0.0.1", 0))
    quiet.listen(1)  # accepts the connection, never answers
    monkeypatch.setattr(hub, "HUB_TIMEOUT_S", 0.5)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{quiet.getsockname()[1]}")
    try:
        start = time.perf_counter()
        assert hub.lookup("org/model").status == "unreachable"
        assert time.perf_counter() - start < 3.0
    finally:
        quiet.close()


def test_kind_is_checked():
    with pytest.raises(ValueError, match="kind must be"):
        hub.lookup("org/m", "space")
