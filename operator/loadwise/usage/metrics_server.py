"""metrics-server source, its declaration and its client in one module: NodeMetrics from
`metrics.k8s.io/v1beta1` through the API server's aggregation layer; one list call per refresh
for all nodes (and one for all pods' PodMetrics), decoded and read a slice at a time.

NodeMetrics report absolute usage; utilisation divides by the node's allocatable, which the
scheduler's ClusterState already holds. A sample covers placements made before its window
began; pods placed during the window are still estimated by the scorer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

import aiohttp
import orjson

from ..kube.permission import Permission
from ..kube.transport import Http
from ..resources import CPU, MEMORY, to_amount
from . import sliced_json
from .answers import error_text
from .cache import MetricsSource, NodeSample, PodUsage, SourceError
from .source_kind import BuildContext, SourceSettings

PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
PODS_PATH = "/apis/metrics.k8s.io/v1beta1/pods"
TIMEOUT = aiohttp.ClientTimeout(total=5)
SLICE_BYTES = 1 << 16  # about 250 PodMetrics: 1-2 ms to decode and read


class MetricsServerError(SourceError):
    pass


def http_error(status: int, body: bytes, what: str) -> MetricsServerError:
    """An error a user can act on: what the status means for the aggregation layer, and the
    API server's own message as text (a Status object's message, or the body decoded)."""
    text = error_text(body, "message")
    if status == 404:
        hint = "is the metrics.k8s.io APIService installed?"
    elif status == 503:
        hint = "the metrics.k8s.io APIService is not available: is metrics-server running?"
    elif status in (401, 403):
        hint = f"the operator's ServiceAccount may not list {what}.metrics.k8s.io (RBAC)"
    else:
        hint = ""
    detail = "; ".join(part for part in (hint, text) if part)
    return MetricsServerError(f"listing {what} metrics failed with HTTP {status}: {detail}")


def parse_node_metrics(
    payload: Any, allocatable: Callable[[str], Mapping[str, int] | None]
) -> dict[str, NodeSample]:
    """A whole NodeMetricsList (decoded) as samples."""
    out: dict[str, NodeSample] = {}
    add_node_metrics(_items(payload, "NodeMetricsList"), allocatable, out)
    return out


def add_node_metrics(
    items: Iterable[Any],
    allocatable: Callable[[str], Mapping[str, int] | None],
    out: dict[str, NodeSample],
) -> None:
    """NodeMetrics into `out`, utilisation of each node's allocatable; malformed ones and
    nodes without allocatable are skipped."""
    for item in items:
        try:
            name = item["metadata"]["name"]
            usage = item["usage"]
            window = _seconds(item.get("window", "0s"))
            stamp = datetime.fromisoformat(str(item["timestamp"]).replace("Z", "+00:00"))
            cpu = to_amount(CPU, usage["cpu"])
            memory = to_amount(MEMORY, usage["memory"])
        except (KeyError, TypeError, ValueError):
            continue
        capacity = allocatable(name)
        if not capacity or not capacity.get(CPU) or not capacity.get(MEMORY):
            continue  # unknown node or no allocatable: cannot turn usage into utilisation
        out[name] = NodeSample(
            min(1.0, cpu / capacity[CPU]),
            min(1.0, memory / capacity[MEMORY]),
            stamp.timestamp(),
            stamp.timestamp() - window,  # the window averages: only earlier pods count fully
        )


def parse_pod_metrics(payload: Any) -> PodUsage:
    """A whole PodMetricsList (decoded) as per-pod usage."""
    out: PodUsage = {}
    add_pod_metrics(_items(payload, "PodMetricsList"), out)
    return out


def add_pod_metrics(items: Iterable[Any], out: PodUsage) -> None:
    """PodMetrics into `out`: the sum of the containers' usage. A pod with any malformed
    container is skipped (a partial sum would under-state it), as is one with none."""
    for item in items:
        try:
            meta = item["metadata"]
            pod = (meta["namespace"], meta["name"])
            containers = item["containers"]
            cpu = memory = 0
            for container in containers:
                usage = container["usage"]
                container_cpu = to_amount(CPU, usage["cpu"])
                container_memory = to_amount(MEMORY, usage["memory"])
                if container_cpu < 0 or container_memory < 0:
                    raise ValueError("negative usage")
                cpu += container_cpu
                memory += container_memory
        except (KeyError, TypeError, ValueError):
            continue
        if containers and all(isinstance(part, str) and part for part in pod):
            out[pod] = (cpu, memory)


def _items(payload: Any, kind: str) -> list[Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("items"), list):
        raise MetricsServerError(f"not a {kind}")
    items: list[Any] = payload["items"]
    return items


async def _in_slices(body: bytes, kind: str) -> AsyncIterator[list[Any]]:
    """The list's items a slice at a time (sliced_json.py), letting the event loop run
    between slices: 150,000 pods' PodMetricsList is tens of MB."""
    try:
        pieces = sliced_json.slices(body, "items", "metadata", SLICE_BYTES)
        last = _items(next(pieces), kind)
        for piece in pieces:
            yield piece
            await asyncio.sleep(0)
    except orjson.JSONDecodeError as exc:
        raise MetricsServerError(f"the {kind} is not JSON: {exc}") from None
    yield last


def _seconds(text: str) -> float:
    """Go durations as metrics-server writes them ("10.5s", "1m0s")."""
    total, number = 0.0, ""
    for char in str(text):
        if char.isdigit() or char == ".":
            number += char
        elif char in "hms" and number:
            total += float(number) * {"h": 3600, "m": 60, "s": 1}[char]
            number = ""
        else:
            raise ValueError(f"bad duration {text!r}")
    return total


class MetricsServerSource:
    name = "metrics-server"
    dimensions: Collection[str] = ()  # CPU and memory only

    def __init__(
        self,
        transport: Http,
        allocatable: Callable[[str], Mapping[str, int] | None],
        ready: asyncio.Event | None = None,
    ) -> None:
        """`allocatable`: a node's, from the state, asked once `ready` is set (listed)."""
        self.transport = transport
        self.allocatable = allocatable
        self.ready = ready

    async def fetch(self) -> dict[str, NodeSample]:
        status, body = await self.transport.request("GET", PATH, timeout=TIMEOUT)
        if status != 200:
            raise http_error(status, body, "node")
        if self.ready is not None:
            await self.ready.wait()
        samples: dict[str, NodeSample] = {}
        async for items in _in_slices(body, "NodeMetricsList"):
            add_node_metrics(items, self.allocatable, samples)
        return samples

    async def fetch_pods(self) -> PodUsage:
        status, body = await self.transport.request("GET", PODS_PATH, timeout=TIMEOUT)
        if status != 200:
            raise http_error(status, body, "pod")
        usage: PodUsage = {}
        async for items in _in_slices(body, "PodMetricsList"):
            add_pod_metrics(items, usage)
        return usage


class MetricsServerSettings(SourceSettings):
    """metrics-server has no settings of its own: it is reached through the API server."""

    source_name = "metrics-server"
    permissions = tuple(
        Permission("list", "metrics.k8s.io", resource) for resource in ("nodes", "pods")
    )

    def build(self, context: BuildContext) -> MetricsSource:
        return MetricsServerSource(context.transport, context.allocatable, context.ready)
