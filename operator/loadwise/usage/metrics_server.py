"""metrics-server source, its declaration and its client in one module: NodeMetrics from
`metrics.k8s.io/v1beta1` through the API server's aggregation layer; one list call per refresh
for all nodes (and one for all pods' PodMetrics).

NodeMetrics report absolute usage; utilisation divides by the node's allocatable, which the
scheduler's ClusterState already holds. A sample covers placements made before its window
began; pods placed during the window are still estimated by the scorer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

import aiohttp

from ..kube.permission import Permission
from ..kube.transport import Http
from ..resources import CPU, MEMORY, to_amount
from .answers import error_text
from .cache import MetricsSource, NodeSample, PodUsage, SourceError
from .source_kind import BuildContext, SourceSettings

PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
PODS_PATH = "/apis/metrics.k8s.io/v1beta1/pods"
TIMEOUT = aiohttp.ClientTimeout(total=5)


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
    if not isinstance(payload, dict) or not isinstance(payload.get("items"), list):
        raise MetricsServerError("not a NodeMetricsList")
    out: dict[str, NodeSample] = {}
    for item in payload["items"]:
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
    return out


def parse_pod_metrics(payload: Any) -> PodUsage:
    """A PodMetricsList as per-pod usage: the sum of the containers' usage. A pod with any
    malformed container is skipped (a partial sum would under-state it), as is one with none."""
    if not isinstance(payload, dict) or not isinstance(payload.get("items"), list):
        raise MetricsServerError("not a PodMetricsList")
    out: PodUsage = {}
    for item in payload["items"]:
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
    return out


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
        return parse_node_metrics(json.loads(body), self.allocatable)

    async def fetch_pods(self) -> PodUsage:
        status, body = await self.transport.request("GET", PODS_PATH, timeout=TIMEOUT)
        if status != 200:
            raise http_error(status, body, "pod")
        return parse_pod_metrics(json.loads(body))


class MetricsServerSettings(SourceSettings):
    """metrics-server has no settings of its own: it is reached through the API server."""

    source_name = "metrics-server"
    permissions = tuple(
        Permission("list", "metrics.k8s.io", resource) for resource in ("nodes", "pods")
    )

    def build(self, context: BuildContext) -> MetricsSource:
        return MetricsServerSource(context.transport, context.allocatable, context.ready)
