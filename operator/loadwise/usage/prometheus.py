"""Prometheus source: one PromQL instant query per refresh returns every node dimension (CPU,
memory and any configured extra ones) for all nodes; a second one, per-pod CPU and memory.

The per-resource queries are joined into one request with `label_replace(...) or ...`, each
series tagged with its resource in the `loadwise_resource` label.
Node defaults fit node-exporter series carrying a `node` label (the usual kubernetes_sd
relabelling); pod defaults fit cAdvisor's container series (`namespace` and `pod` labels).
Answers are decoded and read a slice at a time (sliced_json.py, prometheus_answers.py), so a
large cluster's answer never holds the event loop for long.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import ssl
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from . import sliced_json
from .answers import error_text
from .cache import NodeSample, PodUsage
from .prometheus_answers import (
    RESOURCE_LABEL,
    NodeAnswer,
    NodeLabelMissing,
    PodAnswer,
    PrometheusError,
    vector,
)
from .scrape_intervals import (
    DEFAULT_LAG,
    WINDOW,
    intervals_by_target,
    lag_for,
    metric_interval,
    window_for,
    windowed_metrics,
    with_window,
)

if TYPE_CHECKING:
    from .prometheus_settings import PrometheusSettings

log = logging.getLogger(__name__)

READ_STEP = 1 << 20  # bytes of an answer read between two yields to the event loop


def combined_query(
    cpu_query: str, memory_query: str, dimensions: Mapping[str, str] | None = None
) -> str:
    """One query for all resources; each series carries its resource name."""
    queries = {"cpu": cpu_query, "memory": memory_query, **(dimensions or {})}
    return " or ".join(
        f'label_replace({query}, "{RESOURCE_LABEL}", "{name}", "", "")'
        for name, query in queries.items()
    )


@dataclass(frozen=True)
class Connection:
    """How to reach Prometheus beyond its URL: the CA of an https URL, a bearer token or basic
    auth (read from files for every query, so rotated secrets are picked up), extra headers
    (a tenant for Thanos, Cortex or Mimir)."""

    ca_file: str = ""
    bearer_token_file: str = ""
    username: str = ""
    password_file: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.bearer_token_file:
            token = Path(self.bearer_token_file).read_text().strip()
            headers["Authorization"] = f"Bearer {token}"
        elif self.username:
            password = Path(self.password_file).read_text().rstrip("\n")
            pair = base64.b64encode(f"{self.username}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        return headers


class PrometheusSource:
    name = "prometheus"
    # How often Prometheus is asked again for its scrape intervals (a minute after a failure).
    rediscover_every = 600.0
    retry_discovery = 60.0

    def __init__(
        self,
        settings: PrometheusSettings,
        lag: float | None = None,
        known_nodes: Callable[[], Collection[str]] | None = None,
        ready: asyncio.Event | None = None,
    ) -> None:
        """`known_nodes`: the cluster's node names, to tell a node label holding something
        else (an instance address) from nodes without samples; asked once `ready` is set
        (the state is listed: the query itself need not wait for that). `lag` None: derived
        from the scrape interval when the CPU query's window is `$window`, else 75 s."""
        cpu_query, memory_query = settings.cpu_query, settings.memory_query
        pod_cpu_query, pod_memory_query = settings.pod_cpu_query, settings.pod_memory_query
        dimensions = settings.dimensions
        self.url = settings.url.rstrip("/")
        self.dimensions = dict(dimensions or {})
        self.query = combined_query(cpu_query, memory_query, self.dimensions)
        self.pod_query = combined_query(pod_cpu_query, pod_memory_query)
        self.node_metrics = windowed_metrics([cpu_query, memory_query, *self.dimensions.values()])
        self.pod_metrics = windowed_metrics([pod_cpu_query, pod_memory_query])
        self.lag_setting = lag
        self.derives_lag = lag is None and WINDOW in cpu_query
        self.intervals: dict[str, float] = {}  # metric -> scrape interval, as Prometheus says
        self.discovery_error: str | None = None
        self._next_discovery = -math.inf
        self._discovery = asyncio.Lock()
        self.node_label = settings.node_label
        self.device_query = settings.device_query
        self.device_memory_query = settings.device_memory_query
        self.device_label, self.device_attribute = settings.device_label, settings.device_attribute
        self.timeout = aiohttp.ClientTimeout(total=settings.timeout)
        self._session: aiohttp.ClientSession | None = None
        self.known_nodes = known_nodes
        self.ready = ready
        self.connection = settings.connection()

    def interval(self, metrics: Collection[str]) -> float | None:
        """The longest scrape interval of these metrics' targets, if Prometheus said."""
        return max((self.intervals[m] for m in metrics if m in self.intervals), default=None)

    @property
    def lag(self) -> float:
        """How long before a query a placement must be to show fully in its figures."""
        if self.lag_setting is not None:
            return self.lag_setting
        return lag_for(self.interval(self.node_metrics)) if self.derives_lag else DEFAULT_LAG

    @property
    def window(self) -> float:
        return window_for(self.interval(self.node_metrics))

    async def fetch(self) -> dict[str, NodeSample]:
        return await self.fetch_at(None)

    async def fetch_at(self, when: float | None) -> dict[str, NodeSample]:
        """Every node's sample, now, or as the same query answers for the past time `when`
        (what a window needs before this replica started: the cache's backfill)."""
        await self._discover()
        answer = NodeAnswer(self.node_label, self.lag, self.dimensions)
        await self._feed(with_window(self.query, self.window), answer, when)
        if self.ready is not None:
            await self.ready.wait()
        known = self.known_nodes() if self.known_nodes is not None else ()
        try:
            for _ in answer.finish():
                await asyncio.sleep(0)
        except NodeLabelMissing as exc:
            raise NodeLabelMissing(f"{exc}{await self._label_hint(known)}") from None
        samples = answer.samples
        # Only now: at a past time the cluster's nodes may not have existed yet (a backfill).
        if when is None and samples and known and not any(name in known for name in samples):
            raise PrometheusError(
                f"no series' {self.node_label!r} label names a node of the cluster "
                f"(LOADWISE_PROMETHEUS_NODE_LABEL): it holds values such as "
                f"{_examples(samples)}; the nodes are such as {_examples(known)}"
            )
        return samples

    async def _label_hint(self, known: Collection[str]) -> str:
        """What one raw series of the metric the node query rates carries, and the preset
        that reads such labels; empty when that cannot be asked."""
        for metric in sorted(self.node_metrics):
            try:
                found = vector(await self._query(f"topk(1, {metric})"))
                labels = found[0]["metric"] if found else None
            except (PrometheusError, aiohttp.ClientError, TimeoutError, LookupError, TypeError):
                return ""
            if not isinstance(labels, dict):
                continue
            shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")[
                :300
            ]
            instance = labels.get("instance")
            if self.node_label in labels:
                fits = f"it has {self.node_label!r}: does the query aggregate it away?"
            elif instance in known:
                fits = "its `instance` is the node's name: preset kube-prometheus"
            else:
                fits = (
                    "no label of it names a node: preset kube-prometheus-stack (which reads "
                    "the kubelet's cAdvisor series), or relabel these series with `node`"
                )
            return f". A {metric} series carries {shown}; {fits}"
        return ""

    async def fetch_pods(self) -> PodUsage:
        await self._discover()
        window = window_for(self.interval(self.pod_metrics))
        answer = PodAnswer()
        await self._feed(with_window(self.pod_query, window), answer)
        for _ in answer.finish():
            await asyncio.sleep(0)
        return answer.usage

    async def _discover(self) -> None:
        """Ask Prometheus how often it scrapes the metrics the `$window` queries rate, at the
        first refresh and every `rediscover_every` seconds. A Prometheus-compatible service
        without these endpoints (Thanos, Mimir) leaves the one-minute window and 75 s lag."""
        metrics = sorted(self.node_metrics | self.pod_metrics)
        if not metrics or time.monotonic() < self._next_discovery:
            return
        async with self._discovery:  # fetch and fetch_pods run concurrently: ask once
            if time.monotonic() < self._next_discovery:
                return
            self._next_discovery = time.monotonic() + self.retry_discovery
            try:
                targets = intervals_by_target(
                    await self._get("/api/v1/targets", {"state": "active"})
                )
                found = {}
                for metric in metrics:
                    answer = await self._get("/api/v1/targets/metadata", {"metric": metric})
                    if (interval := metric_interval(answer, targets)) is not None:
                        found[metric] = interval
            except (PrometheusError, ValueError, aiohttp.ClientError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
                log.log(
                    logging.DEBUG if error == self.discovery_error else logging.WARNING,
                    "cannot read Prometheus' scrape intervals (%s): rate windows of %gs and a "
                    "lag of %gs assumed (set LOADWISE_METRICS_LAG, and a window in the queries, "
                    "to choose them)",
                    error,
                    self.window,
                    self.lag,
                )
                self.discovery_error = error
                return
            self.discovery_error = None
            if found.keys() >= set(metrics):  # else not scraped yet: ask again in a minute
                self._next_discovery = time.monotonic() + self.rediscover_every
            if found != self.intervals:
                self.intervals = found
                log.info(
                    "Prometheus scrapes %s: node rate window %gs, lag %gs",
                    ", ".join(f"{m} every {s:g}s" for m, s in sorted(found.items())) or "none",
                    self.window,
                    self.lag,
                )

    async def instant(self, query: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's series: (labels, value) each (devices' utilisation)."""
        series = []
        for item in vector(await self._query(query)):
            try:
                labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
                series.append((labels, float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                continue  # a malformed series is one device without a figure
        return series

    async def _query(self, query: str) -> Any:
        return await self._request("POST", "/api/v1/query", data={"query": query})

    async def _get(self, path: str, params: Mapping[str, str]) -> Any:
        return await self._request("GET", path, params=params)

    async def _feed(
        self, query: str, answer: NodeAnswer | PodAnswer, when: float | None = None
    ) -> None:
        """Ask an instant query (at `when`, or now) and give its series to `answer` a slice at
        a time, letting the event loop run between slices (sliced_json.py: 150,000 pods'
        answer is tens of MB)."""
        data = {"query": query} if when is None else {"query": query, "time": f"{when:.3f}"}
        body = await self._request_body("POST", "/api/v1/query", data=data)
        try:
            pieces = sliced_json.slices(body, "result", "metric")
            answer.add(vector(next(pieces)))
            for piece in pieces:
                await asyncio.sleep(0)
                answer.add(piece)
        except orjson.JSONDecodeError as exc:
            raise PrometheusError(f"the answer is not JSON: {exc}") from None

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        body = await self._request_body(method, path, **kwargs)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise PrometheusError(f"the answer is not JSON: {exc}") from None

    async def _request_body(self, method: str, path: str, **kwargs: Any) -> bytes | bytearray:
        connection = self.connection
        if self._session is None or self._session.closed:
            tls = connection.ssl_context()
            connector = aiohttp.TCPConnector(ssl=tls) if tls is not None else None
            self._session = aiohttp.ClientSession(timeout=self.timeout, connector=connector)
        try:
            headers = connection.request_headers()
        except OSError as exc:
            raise PrometheusError(f"cannot read Prometheus credentials: {exc}") from None
        async with self._session.request(
            method, self.url + path, headers=headers, **kwargs
        ) as resp:
            if resp.status != 200:
                text = error_text(await resp.read(), "error")
                raise PrometheusError(f"HTTP {resp.status}: {text}")
            # Gathered as it comes, the loop let run every MB: one read() of 37 MB
            # would join it all in one step (15 ms and more).
            body, seen = bytearray(), 0
            async for chunk in resp.content.iter_any():
                body += chunk
                if len(body) - seen >= READ_STEP:
                    seen = len(body)
                    await asyncio.sleep(0)
        return body

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _examples(names: Collection[str], count: int = 3) -> str:
    shown = sorted(names)[:count]
    return ", ".join(shown) + (", ..." if len(names) > count else "")
