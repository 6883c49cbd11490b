"""A tiny OpenAI-compatible ``GET /v1/models`` server on 127.0.0.1 for preflight tests, and a closed port."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def models_server(ids: list[str]):
    """Serve ``{"data": [{"id": ...}]}`` at ``/v1/models``; yields the base URL ``http://127.0.0.1:PORT/v1``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.rstrip("/") == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}).encode()
                self.send_response(200)
            else:
                body = b'{"error": "not found"}'
                self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 whose port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
