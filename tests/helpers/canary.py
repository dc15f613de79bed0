"""A local HTTP server that records every request: rendering tests assert that model SVGs never reach it."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def canary_server() -> Iterator[tuple[str, list[str]]]:
    """``(host:port, paths requested so far)`` of a server on 127.0.0.1 that answers with a tiny SVG."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/svg+xml")
            self.end_headers()
            self.wfile.write(b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>')

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
