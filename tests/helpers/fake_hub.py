"""A stand-in for the Hub's ``/api/{models,datasets}/{id}`` endpoint on a local port (``fake_hub`` fixture:
``HF_ENDPOINT`` points at it, offline mode and tokens are cleared, ``HF_HOME`` is a fresh folder)."""

from __future__ import annotations

import http.server
import threading

import pytest

from r1vision import hub


class FakeHub(http.server.BaseHTTPRequestHandler):
    """``/api/models/org/there`` and ``/api/datasets/org/data`` exist; ``org/private`` needs a token (401 without
    one, as the Hub answers for private and missing repos alike); ``org/broken`` is a server error."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        FakeHub.seen.append((self.path, self.headers.get("Authorization")))
        if self.path in ("/api/models/org/there", "/api/datasets/org/data"):
            code = 200
        elif self.path == "/api/models/org/private":
            code = 200 if self.headers.get("Authorization") == "Bearer secret" else 401
        elif self.path == "/api/models/org/broken":
            code = 500
        else:
            code = 404
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in (
        *hub.OFFLINE_VARS,
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "R1VISION_HUB_CHECK",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    FakeHub.seen = []
    yield FakeHub
    server.shutdown()
