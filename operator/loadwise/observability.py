"""The scheduler's own Prometheus metrics and a small HTTP endpoint (/metrics, /healthz)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

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
LEADER = Gauge("loadwise_leader", "1 while this replica holds the leader Lease and schedules.")
DEGRADED = Gauge(
    "loadwise_degraded",
    "1 while a degradation is active (no_policy, crd_missing, api_unreachable, metrics_source).",
    ["reason"],
)
ACCOUNTED_PODS = Gauge(
    "loadwise_accounted_pods", "Pods the scheduler's state holds on nodes (bound or assumed)."
)
ACCOUNTED_CPU = Gauge(
    "loadwise_accounted_cpu_millicores",
    "CPU requests the scheduler's state holds on existing nodes (bound or assumed pods), "
    "millicores.",
)
API_UNREACHABLE_SECONDS = Counter(
    "loadwise_api_unreachable_seconds_total",
    "Seconds the API server did not answer this replica's probes.",
)
REPORT_ERRORS = Counter(
    "loadwise_report_errors_total",
    "Status patches (policies, the operator's condition) that failed; retried next interval.",
)
FRESH_NODES = Gauge("loadwise_metrics_nodes", "Nodes with a metrics sample, by source.", ["source"])
LEARNED_WORKLOADS = Gauge(
    "loadwise_learned_workloads", "Workloads with a learned usage estimate, by source.", ["source"]
)


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


Check = Callable[[], tuple[bool, str]]


async def start_http(host: str, port: int, health: Check, readiness: Check) -> web.AppRunner:
    """/metrics; /healthz fails when a part that should run has died or stalled (a restart
    helps); /readyz is true for the leader and for a synced standby. Both say why."""

    def probe(check: Check) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(_: web.Request) -> web.Response:
            ok, why = check()
            return web.Response(status=200 if ok else 503, text=why + "\n")

        return handle

    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", probe(health))
    app.router.add_get("/readyz", probe(readiness))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
