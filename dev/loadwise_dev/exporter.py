"""An exporter stand-in for simulated nodes: background usage, extra dimensions, and pods.

A simulated node that KWOK does not serve has no kubelet or host behind it, so something must
report its usage; this publishes the series the real exporters do, labelled with `node`, so
loadwise's PromQL runs unchanged against a real Prometheus scraping it:

- node-exporter: `node_cpu_seconds_total{mode="idle"}` (a real counter),
  `node_memory_MemTotal_bytes`, `node_memory_MemAvailable_bytes`, and for a node given a "disk"
  dimension `node_disk_io_time_seconds_total{device="sda"}` (busy seconds, a counter);
- DCGM's exporter, for a node given a "gpu" dimension: `DCGM_FI_DEV_GPU_UTIL{gpu="0"}` (0..100);
  for each device set with `set_device`, the same series with the labels DCGM's exporter names a
  GPU by (`gpu` its index, `UUID`, `Hostname` and `node`), and if given its memory in use
  (`DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_FB_FREE`, MiB): per-device load for DRA devices, since
  this machine has no GPU for the real exporter to read;
- cAdvisor through the kubelet, per pod placed: `container_cpu_usage_seconds_total` (a counter
  integrating the pod's usage since it was placed) and `container_memory_working_set_bytes`,
  with `namespace`, `pod` and `container="main"`: what learned per-workload estimates read.

It serves from a thread, so scrapes never depend on a test's event loop. Where usage is KWOK's
(kwok_usage.py) it serves only the GPU and disk dimensions, which KWOK does not simulate. Node
usage still comes from it for bench/throughput, the simulated nodes beside a real one (the
default preset reads node-exporter series, which KWOK has not), `--usage exporter` of
bench/placement and bench/rebalance, and test_placement.py's exporter run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .httpserve import ThreadedServer

# Queries for these series, with the rate window of the dev cluster's node CPU query
# (`SIM_CPU_QUERY`: 5 s, fitting 1 s scrapes). Per (namespace, pod): CPU cores, memory bytes.
# Like the defaults, a container counts once though two kubelet endpoints (real nodes) have it.
SIM_POD_CPU_QUERY = (
    "sum by (namespace, pod) (max by (namespace, pod, container)"
    ' (rate(container_cpu_usage_seconds_total{container!=""}[5s])))'
)
SIM_POD_MEMORY_QUERY = (
    "sum by (namespace, pod) (max by (namespace, pod, container)"
    ' (container_memory_working_set_bytes{container!=""}))'
)
# Extra node dimensions: PromQL per node (a `node` label), utilisation 0..1.
SIM_DIMENSIONS: dict[str, str] = {
    "gpu": "avg by (node) (DCGM_FI_DEV_GPU_UTIL) / 100",
    "disk": "max by (node) (rate(node_disk_io_time_seconds_total[5s]))",
}
CONTAINER = "main"
GPU_MEMORY_MIB = 40960  # the devices set with set_device: 40 GiB each
DISK_DEVICE = "sda"


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
    dimensions: dict[str, float] = field(default_factory=dict)  # name -> fraction busy
    disk_busy_seconds: float = 0.0
    # A node whose CPU and memory come from elsewhere (KWOK, kwok_usage.py): only its extra
    # dimensions are published here (KWOK simulates no GPU and no disk).
    dimensions_only: bool = False

    @property
    def cpu_utilisation(self) -> float:
        return min(1.0, self.cpu + self.pods_cpu / self.cpu_millis)

    @property
    def memory_utilisation(self) -> float:
        return min(1.0, self.memory + self.pods_memory / self.memory_total)


@dataclass
class _Pod:
    namespace: str
    name: str
    node: str
    cpu_millis: int
    memory: int
    updated: float
    cpu_seconds: float = 0.0  # the container's CPU counter

    def advance(self, now: float) -> None:
        self.cpu_seconds += self.cpu_millis / 1000 * max(0.0, now - self.updated)
        self.updated = now


def _quoted(value: str) -> str:
    """A label value in the text exposition format."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class UsageExporter:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, _Pod] = {}  # by uid
        # (node, UUID) -> index, utilisation %, memory in use % (None: no memory series)
        self._devices: dict[tuple[str, str], tuple[int, float, float | None]] = {}
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

    def set_dimension(self, node: str, name: str, fraction: float) -> None:
        """A node's "gpu" or "disk" is this busy from now on (counters keep the past). A node
        whose usage was never set here gets these series only."""
        if name not in SIM_DIMENSIONS:
            raise ValueError(f"unknown dimension {name!r}: one of {sorted(SIM_DIMENSIONS)}")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"{name} utilisation {fraction} is not within 0..1")
        with self._lock:
            now = time.time()
            target = self._nodes.get(node)
            if target is None:
                target = _Node(0.0, 0.0, 1, 1, 0.0, now, dimensions_only=True)
                self._nodes[node] = target
            self._advance(target, now)
            target.dimensions[name] = fraction

    def set_device(
        self, node: str, uuid: str, index: int, percent: float | None, memory: float | None = None
    ) -> None:
        """One GPU's utilisation in percent from now on (None: the device is gone), and the
        share of its 40 GiB memory in use (None: no memory series, as before)."""
        with self._lock:
            if percent is None:
                self._devices.pop((node, uuid), None)
            else:
                self._devices[(node, uuid)] = (index, percent, memory)

    def clear_dimension(self, node: str, name: str) -> None:
        """A node no longer has this dimension: its series disappear (and go stale in
        Prometheus), as on a node without the hardware. Never fails, so cleanup can call it."""
        with self._lock:
            target = self._nodes.get(node)
            if target is None or name not in target.dimensions:
                return
            self._advance(target, time.time())  # the disk counter keeps what it counted
            del target.dimensions[name]

    def place_pod(
        self,
        uid: str,
        node: str,
        cpu_millis: int,
        memory: int,
        *,
        namespace: str = "default",
        name: str = "",
    ) -> None:
        """A pod now runs on `node` using this much (idempotent per uid: an update of the same
        pod on the same node keeps its CPU counter, which never goes back)."""
        now = time.time()
        with self._lock:
            previous = self._unplace(uid, now)
            target = self._nodes.get(node)
            if target is None:
                return
            self._advance(target, now)
            target.pods_cpu += cpu_millis
            target.pods_memory += memory
            pod = _Pod(namespace, name or uid, node, cpu_millis, memory, now)
            if previous is not None and (previous.namespace, previous.name, previous.node) == (
                pod.namespace,
                pod.name,
                pod.node,
            ):
                pod.cpu_seconds = previous.cpu_seconds
            self._pods[uid] = pod

    def keep_only(self, uids: set[str]) -> None:
        """Forget pods not in `uids` (after a relist)."""
        with self._lock:
            now = time.time()
            for uid in [u for u in self._pods if u not in uids]:
                self._unplace(uid, now)

    def remove_pod(self, uid: str) -> None:
        with self._lock:
            self._unplace(uid, time.time())

    def _unplace(self, uid: str, now: float) -> _Pod | None:
        placed = self._pods.pop(uid, None)
        if placed is None:
            return None
        placed.advance(now)
        node = self._nodes.get(placed.node)
        if node is not None:
            self._advance(node, now)
            node.pods_cpu -= placed.cpu_millis
            node.pods_memory -= placed.memory
        return placed

    def utilisation(self) -> dict[str, tuple[float, float]]:
        """Ground truth now: node -> (cpu, memory) utilisation."""
        with self._lock:
            return {
                n: (v.cpu_utilisation, v.memory_utilisation)
                for n, v in self._nodes.items()
                if not v.dimensions_only
            }

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

    def pod_usage(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Ground truth now: (namespace, pod) -> (cpu millicores, memory bytes) it uses."""
        with self._lock:
            return {(p.namespace, p.name): (p.cpu_millis, p.memory) for p in self._pods.values()}

    def pod_count(self) -> int:
        with self._lock:
            return len(self._pods)

    def remove(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)

    @staticmethod
    def _advance(node: _Node, now: float) -> None:
        elapsed = max(0.0, now - node.updated)
        node.idle_seconds += (1.0 - node.cpu_utilisation) * elapsed
        node.disk_busy_seconds += node.dimensions.get("disk", 0.0) * elapsed
        node.updated = now

    def render(self) -> str:
        """The exposition text, one block per metric family (as the format requires)."""
        now = time.time()
        idle, total, available, disk, gpu, pod_cpu, pod_memory = ([] for _ in range(7))
        fb_used: list[str] = []
        fb_free: list[str] = []
        with self._lock:
            for name, node in self._nodes.items():
                self._advance(node, now)
                label = _quoted(name)
                if not node.dimensions_only:
                    idle.append(
                        f'node_cpu_seconds_total{{node={label},cpu="0",mode="idle"}} '
                        f"{node.idle_seconds:.6f}"
                    )
                    total.append(f"node_memory_MemTotal_bytes{{node={label}}} {node.memory_total}")
                    free = int(node.memory_total * (1.0 - node.memory_utilisation))
                    available.append(f"node_memory_MemAvailable_bytes{{node={label}}} {free}")
                if "disk" in node.dimensions:
                    disk.append(
                        f'node_disk_io_time_seconds_total{{node={label},device="{DISK_DEVICE}"}} '
                        f"{node.disk_busy_seconds:.6f}"
                    )
                if "gpu" in node.dimensions:
                    gpu.append(
                        f'DCGM_FI_DEV_GPU_UTIL{{node={label},gpu="0"}} '
                        f"{node.dimensions['gpu'] * 100:.3f}"
                    )
            for (node_name, uuid), (index, percent, memory) in self._devices.items():
                labels = (
                    f'gpu="{index}",UUID={_quoted(uuid)},Hostname={_quoted(node_name)},'
                    f"node={_quoted(node_name)}"
                )
                gpu.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {percent:.3f}")
                if memory is not None:  # MiB, as DCGM's exporter reports them
                    used = round(GPU_MEMORY_MIB * memory / 100)
                    fb_used.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {used}")
                    fb_free.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {GPU_MEMORY_MIB - used}")
            for pod in self._pods.values():
                if pod.node not in self._nodes:
                    continue  # its node is gone, and with it the kubelet that reported it
                pod.advance(now)
                labels = (
                    f"namespace={_quoted(pod.namespace)},pod={_quoted(pod.name)},"
                    f'container="{CONTAINER}",node={_quoted(pod.node)}'
                )
                pod_cpu.append(
                    f"container_cpu_usage_seconds_total{{{labels}}} {pod.cpu_seconds:.6f}"
                )
                pod_memory.append(f"container_memory_working_set_bytes{{{labels}}} {pod.memory}")
        families = (
            ("node_cpu_seconds_total", "counter", idle),
            ("node_memory_MemTotal_bytes", "gauge", total),
            ("node_memory_MemAvailable_bytes", "gauge", available),
            ("node_disk_io_time_seconds_total", "counter", disk),
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", gpu),
            ("DCGM_FI_DEV_FB_USED", "gauge", fb_used),
            ("DCGM_FI_DEV_FB_FREE", "gauge", fb_free),
            ("container_cpu_usage_seconds_total", "counter", pod_cpu),
            ("container_memory_working_set_bytes", "gauge", pod_memory),
        )
        lines = []
        for family, kind, samples in families:
            lines.append(f"# TYPE {family} {kind}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"
