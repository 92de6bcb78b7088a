"""Prometheus source: one PromQL instant query per refresh returns CPU and memory for all nodes.

The two per-resource queries are joined into one request with `label_replace(...) or ...`.
Defaults fit node-exporter series carrying a `node` label (the usual kubernetes_sd relabelling).
"""

from __future__ import annotations

import math
from typing import Any

import aiohttp

from .cache import NodeSample

DEFAULT_CPU_QUERY = '1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[1m]))'
DEFAULT_MEMORY_QUERY = (
    "1 - sum by (node) (node_memory_MemAvailable_bytes)"
    " / sum by (node) (node_memory_MemTotal_bytes)"
)
_RESOURCE_LABEL = "loadwise_resource"


class PrometheusError(RuntimeError):
    pass


def combined_query(cpu_query: str, memory_query: str) -> str:
    return (
        f'label_replace({cpu_query}, "{_RESOURCE_LABEL}", "cpu", "", "")'
        f' or label_replace({memory_query}, "{_RESOURCE_LABEL}", "memory", "", "")'
    )


def parse_response(payload: Any, node_label: str, lag: float) -> dict[str, NodeSample]:
    """Turn a /api/v1/query answer into samples. Malformed entries are skipped, never fatal;
    a malformed envelope raises PrometheusError. `lag` is how far before the evaluation time a
    placement must be to show fully in the figures (rate window plus scrape interval): pods
    placed later are still estimated by the scorer."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise PrometheusError(f"query failed: {error or 'unexpected response'}")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError("query did not return an instant vector")
    partial: dict[str, dict[str, float]] = {}
    stamps: dict[str, float] = {}
    for item in data.get("result") or ():
        try:
            labels = item["metric"]
            node = labels[node_label]
            resource = labels[_RESOURCE_LABEL]
            stamp = float(item["value"][0])
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if not math.isfinite(value) or not math.isfinite(stamp):
            continue
        partial.setdefault(node, {})[resource] = min(1.0, max(0.0, value))
        stamps[node] = min(stamp, stamps.get(node, stamp))
    return {
        node: NodeSample(values["cpu"], values["memory"], stamps[node], stamps[node] - lag)
        for node, values in partial.items()
        if "cpu" in values and "memory" in values
    }


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        url: str,
        cpu_query: str = DEFAULT_CPU_QUERY,
        memory_query: str = DEFAULT_MEMORY_QUERY,
        node_label: str = "node",
        lag: float = 15.0,
        timeout: float = 5.0,
    ) -> None:
        self.url = url.rstrip("/") + "/api/v1/query"
        self.query = combined_query(cpu_query, memory_query)
        self.node_label = node_label
        self.lag = lag
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self) -> dict[str, NodeSample]:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        async with self._session.post(self.url, data={"query": self.query}) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                raise PrometheusError(f"HTTP {resp.status}: {text}")
            payload = await resp.json(content_type=None)
        return parse_response(payload, self.node_label, self.lag)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
