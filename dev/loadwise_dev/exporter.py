"""A node-exporter stand-in for simulated nodes: background usage plus the pods placed there.

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

from .httpserve import ThreadedServer


@dataclass
class _Node:
    cpu: float  # background utilisation fraction
    memory: float
    memory_total: int
    cpu_millis: int  # capacity, to turn pod usage into utilisation
    idle_seconds: float
    updated: float
    pods_cpu: int = 0  # millicores used by pods placed here
    pods_memory: int = 0  # bytes

    @property
    def cpu_utilisation(self) -> float:
        return min(1.0, self.cpu + self.pods_cpu / self.cpu_millis)

    @property
    def memory_utilisation(self) -> float:
        return min(1.0, self.memory + self.pods_memory / self.memory_total)


class UsageExporter:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, tuple[str, int, int]] = {}  # uid -> (node, cpu millis, bytes)
        self._lock = threading.Lock()
        self._http = ThreadedServer(
            lambda _: (200, "text/plain; version=0.0.4", self.render().encode()), host, port
        )

    @property
    def address(self) -> str:
        return f"{self._host}:{self._http.port}"

    def start(self) -> UsageExporter:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def set_usage(
        self,
        node: str,
        cpu: float,
        memory: float,
        memory_total: int = 16 << 30,
        cpu_millis: int = 4000,
    ) -> None:
        """Background usage fractions from now on; the idle counter integrates the old rate."""
        now = time.time()
        with self._lock:
            current = self._nodes.get(node)
            if current is None:
                self._nodes[node] = _Node(cpu, memory, memory_total, cpu_millis, 0.0, now)
                return
            self._advance(current, now)
            current.cpu, current.memory = cpu, memory
            current.memory_total, current.cpu_millis = memory_total, cpu_millis

    def place_pod(self, uid: str, node: str, cpu_millis: int, memory: int) -> None:
        """A pod now runs on `node` using this much (idempotent per uid)."""
        now = time.time()
        with self._lock:
            self._unplace(uid, now)
            target = self._nodes.get(node)
            if target is None:
                return
            self._advance(target, now)
            target.pods_cpu += cpu_millis
            target.pods_memory += memory
            self._pods[uid] = (node, cpu_millis, memory)

    def keep_only(self, uids: set[str]) -> None:
        """Forget pods not in `uids` (after a relist)."""
        with self._lock:
            now = time.time()
            for uid in [u for u in self._pods if u not in uids]:
                self._unplace(uid, now)

    def remove_pod(self, uid: str) -> None:
        with self._lock:
            self._unplace(uid, time.time())

    def _unplace(self, uid: str, now: float) -> None:
        placed = self._pods.pop(uid, None)
        if placed is None:
            return
        node = self._nodes.get(placed[0])
        if node is not None:
            self._advance(node, now)
            node.pods_cpu -= placed[1]
            node.pods_memory -= placed[2]

    def utilisation(self) -> dict[str, tuple[float, float]]:
        """Ground truth now: node -> (cpu, memory) utilisation."""
        with self._lock:
            return {n: (v.cpu_utilisation, v.memory_utilisation) for n, v in self._nodes.items()}

    def absolute_usage(self) -> dict[str, tuple[int, int]]:
        """Ground truth now: node -> (cpu millicores, memory bytes) in use."""
        with self._lock:
            return {
                n: (
                    int(v.cpu_utilisation * v.cpu_millis),
                    int(v.memory_utilisation * v.memory_total),
                )
                for n, v in self._nodes.items()
            }

    def pod_count(self) -> int:
        with self._lock:
            return len(self._pods)

    def remove(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)

    @staticmethod
    def _advance(node: _Node, now: float) -> None:
        node.idle_seconds += (1.0 - node.cpu_utilisation) * max(0.0, now - node.updated)
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
                available = int(node.memory_total * (1.0 - node.memory_utilisation))
                lines.append(
                    f'node_cpu_seconds_total{{node="{name}",cpu="0",mode="idle"}} '
                    f"{node.idle_seconds:.6f}"
                )
                lines.append(f'node_memory_MemTotal_bytes{{node="{name}"}} {node.memory_total}')
                lines.append(f'node_memory_MemAvailable_bytes{{node="{name}"}} {available}')
        return "\n".join(lines) + "\n"
