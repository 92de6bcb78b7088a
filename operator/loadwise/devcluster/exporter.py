"""A node-exporter stand-in for simulated nodes: each node's CPU and memory usage, settable.

There is no kubelet or real host behind a simulated node, so something must report its usage;
this publishes the same series node-exporter does (`node_cpu_seconds_total{mode="idle"}` as a
real counter, `node_memory_MemTotal_bytes`, `node_memory_MemAvailable_bytes`), labelled with
`node`, so loadwise's default PromQL runs unchanged against a real Prometheus scraping it.
It serves from a thread, so scrapes never depend on a test's event loop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class _Node:
    cpu: float  # utilisation fraction
    memory: float
    memory_total: int
    idle_seconds: float
    updated: float


class UsageExporter:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._nodes: dict[str, _Node] = {}
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"{self._host}:{self._server.server_port}"

    def start(self) -> UsageExporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() would wait forever for a loop never started
            self._server.shutdown()
        self._server.server_close()

    def set_usage(self, node: str, cpu: float, memory: float, memory_total: int = 16 << 30) -> None:
        """Usage fractions from now on; the idle counter integrates the old rate up to now."""
        now = time.time()
        with self._lock:
            current = self._nodes.get(node)
            if current is None:
                self._nodes[node] = _Node(cpu, memory, memory_total, 0.0, now)
                return
            self._advance(current, now)
            current.cpu, current.memory, current.memory_total = cpu, memory, memory_total

    def remove(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)

    @staticmethod
    def _advance(node: _Node, now: float) -> None:
        node.idle_seconds += (1.0 - node.cpu) * max(0.0, now - node.updated)
        node.updated = now

    def render(self) -> str:
        now = time.time()
        lines = [
            "# TYPE node_cpu_seconds_total counter",
            "# TYPE node_memory_MemTotal_bytes gauge",
            "# TYPE node_memory_MemAvailable_bytes gauge",
        ]
        with self._lock:
            for name, node in self._nodes.items():
                self._advance(node, now)
                available = int(node.memory_total * (1.0 - node.memory))
                lines.append(
                    f'node_cpu_seconds_total{{node="{name}",cpu="0",mode="idle"}} '
                    f"{node.idle_seconds:.6f}"
                )
                lines.append(f'node_memory_MemTotal_bytes{{node="{name}"}} {node.memory_total}')
                lines.append(f'node_memory_MemAvailable_bytes{{node="{name}"}} {available}')
        return "\n".join(lines) + "\n"
