"""A tiny OpenAI-compatible ``GET /v1/models`` server on 127.0.0.1 for preflight tests, and a closed port."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def models_server(ids: list | None = None, *, body: bytes | None = None, drip_s: float | None = None,
                  drip_headers: bool = False):
    """Serve ``{"data": [{"id": ...}]}`` (or ``body`` as is) at ``/v1/models``; yields the base URL
    ``http://127.0.0.1:PORT/v1``. ``drip_s``: send one byte of the body (with ``drip_headers``, of the
    status line) every ``drip_s`` seconds, the way a stuck proxy does, so no single read times out."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if drip_s is not None:
                try:
                    if drip_headers:
                        for b in b"HTTP/1.1 200 OK\r\n" * 1000:
                            if stop.is_set():
                                return
                            self.wfile.write(bytes([b]))
                            self.wfile.flush()
                            time.sleep(drip_s)
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    while not stop.is_set():
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(drip_s)
                except OSError:  # the client gave up
                    return
                return
            if self.path.rstrip("/") == "/v1/models":
                out = body if body is not None else json.dumps(
                    {"object": "list", "data": [{"id": i, "object": "model"} for i in ids or []]}).encode()
                self.send_response(200)
            else:
                out = b'{"error": "not found"}'
                self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 whose port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
