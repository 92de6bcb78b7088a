"""metrics-server source: NodeMetrics from `metrics.k8s.io/v1beta1` through the API server's
aggregation layer; one list call per refresh for all nodes.

NodeMetrics report absolute usage; utilisation divides by the node's allocatable, which the
scheduler's ClusterState already holds. A sample covers placements made before its window
began; pods placed during the window are still estimated by the scorer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import aiohttp

from ..resources import CPU, MEMORY, to_amount
from ..transport import Http
from .cache import NodeSample

PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
TIMEOUT = aiohttp.ClientTimeout(total=5)


class MetricsServerError(RuntimeError):
    pass


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

    def __init__(
        self, transport: Http, allocatable: Callable[[str], Mapping[str, int] | None]
    ) -> None:
        self.transport = transport
        self.allocatable = allocatable

    async def fetch(self) -> dict[str, NodeSample]:
        status, body = await self.transport.request("GET", PATH, timeout=TIMEOUT)
        if status != 200:
            raise MetricsServerError(f"HTTP {status}: {body[:200]!r}")
        return parse_node_metrics(json.loads(body), self.allocatable)
