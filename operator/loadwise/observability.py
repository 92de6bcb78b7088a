"""The scheduler's own Prometheus metrics and a small HTTP endpoint (/metrics, /healthz)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

SCHEDULE_ATTEMPTS = Counter(
    "loadwise_schedule_attempts_total",
    "Scheduling attempts by result (scheduled, unschedulable, error).",
    ["result"],
)
CYCLE_SECONDS = Histogram(
    "loadwise_scheduling_cycle_seconds",
    "Time of one in-memory scheduling cycle (filter, score, pick).",
    buckets=_BUCKETS,
)
BIND_SECONDS = Histogram(
    "loadwise_binding_seconds", "Time of one Binding API call.", buckets=_BUCKETS
)
E2E_SECONDS = Histogram(
    "loadwise_pod_scheduling_seconds",
    "Pod creation to successful bind.",
    buckets=(*_BUCKETS, 30, 60, 300),
)
EVENTS_DROPPED = Counter(
    "loadwise_events_dropped_total",
    "Scheduled events not written because the event buffer was full.",
)
PENDING = Gauge("loadwise_pending_pods", "Pods in the scheduling queue.", ["queue"])
METRICS_REFRESH = Counter(
    "loadwise_metrics_refresh_total",
    "Node metrics refreshes by source and result.",
    ["source", "result"],
)
SOURCE_UP = Gauge(
    "loadwise_metrics_source_up", "1 if the source's last refresh succeeded, else 0.", ["source"]
)
FRESH_NODES = Gauge("loadwise_metrics_nodes", "Nodes with a metrics sample, by source.", ["source"])


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def start_http(host: str, port: int, healthy: Callable[[], bool]) -> web.AppRunner:
    """/metrics, and /healthz that fails once `healthy()` is False (the scheduling loop died):
    kopf's own liveness only proves kopf's tasks are alive."""

    async def healthz(_: web.Request) -> web.Response:
        if healthy():
            return web.Response(text="ok")
        return web.Response(status=503, text="scheduling loop not running")

    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
