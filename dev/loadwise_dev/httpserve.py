"""A small threaded HTTP(S) server for the harness's fake endpoints (exporter, metrics API).

It runs in a thread so that scrapes and proxied calls never depend on a test's event loop.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# path -> (status, content type, body)
Responder = Callable[[str], tuple[int, str, bytes]]


class ThreadedServer:
    def __init__(
        self, respond: Responder, host: str = "127.0.0.1", port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, content_type, body = respond(self.path.split("?", 1)[0])
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.host = host
        self._server = ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() would wait forever for a loop never started
            self._server.shutdown()
        self._server.server_close()
