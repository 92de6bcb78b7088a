"""Runtime: builds the scheduler's services once at startup (held in kopf's memo) and stops them.

Before the loop starts its informers list namespaces, nodes and pods as raw JSON, so the first
decisions already count every pod on every node (kube-scheduler waits for its informer caches for
the same reason); then they watch from where the lists ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from . import observability as obs
from .binder import Binder
from .config import Config
from .informer import Informer, ignore, uid_of
from .metrics.cache import MetricsCache, MetricsSource
from .metrics.metrics_server import MetricsServerSource
from .metrics.prometheus import PrometheusSource
from .queue import SchedulingQueue
from .scheduler import Scheduler
from .state import ClusterState
from .status import metrics_report, status_fields
from .transport import Transport

log = logging.getLogger(__name__)


async def api_client(pool_size: int) -> client.ApiClient:
    """An ApiClient from the in-cluster service account, or from $KUBECONFIG / ~/.kube/config."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        # kubernetes-asyncio reads $KUBECONFIG at import time; read it now instead.
        await kube_config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def metrics_sources(
    config: Config, transport: Transport, state: ClusterState
) -> dict[str, MetricsSource]:
    sources: dict[str, MetricsSource] = {}
    if "prometheus" in config.metrics_sources:
        sources["prometheus"] = PrometheusSource(
            config.prometheus_url,
            cpu_query=config.prometheus_cpu_query,
            memory_query=config.prometheus_memory_query,
            node_label=config.prometheus_node_label,
            lag=config.metrics_lag,
            timeout=config.prometheus_timeout,
        )
    if "metrics-server" in config.metrics_sources:

        def allocatable(name: str) -> dict[str, int] | None:
            node = state.nodes.get(name)
            return dict(node.allocatable) if node is not None else None

        sources["metrics-server"] = MetricsServerSource(transport, allocatable)
    return sources


class Runtime:
    def __init__(
        self, config: Config, api: client.ApiClient, transport: Transport, scheduler: Scheduler
    ) -> None:
        self.config = config
        self.api = api
        self.transport = transport
        self.scheduler = scheduler
        # All three are listed before the first decision, which then sees every pod on every node.
        self.informers = (
            Informer(
                transport,
                "/api/v1/namespaces",
                scheduler.on_namespace_event,
                on_relisted=scheduler.relisted_namespaces,
            ),
            Informer(
                transport,
                "/api/v1/nodes",
                scheduler.on_node_event,
                on_relisted=scheduler.relisted_nodes,
            ),
            Informer(
                transport, "/api/v1/pods", scheduler.on_pod_event, uid_of, scheduler.relisted_pods
            ),
        )
        self._watch_tasks: list[asyncio.Task[None]] = []
        self._loop_task: asyncio.Task[None] | None = None
        self._available: dict[str, bool] = {}  # policy -> metrics available at last check
        self._reconcile_task: asyncio.Task[None] | None = None
        self._http: web.AppRunner | None = None

    @classmethod
    async def start(cls, config: Config) -> Runtime:
        api = await api_client(pool_size=1)  # configuration and credentials; requests: transport
        transport = Transport(api, pool_size=config.bind_concurrency + 8)
        state = ClusterState()
        caches = {
            name: MetricsCache(source, config.metrics_interval)
            for name, source in metrics_sources(config, transport, state).items()
        }
        scheduler = Scheduler(
            config.scheduler_name,
            Binder(transport, config.scheduler_name),
            caches,
            SchedulingQueue(
                config.initial_backoff, config.max_backoff, config.unschedulable_timeout
            ),
            bind_concurrency=config.bind_concurrency,
            failure_event_interval=config.failure_event_interval,
            state=state,
        )
        runtime = cls(config, api, transport, scheduler)
        await runtime._seed()
        runtime._watch_tasks = [
            asyncio.create_task(informer.run(), name=f"loadwise-watch{informer.path}")
            for informer in runtime.informers
        ]
        for task in runtime._watch_tasks:
            task.add_done_callback(_crash_if_failed)
        await runtime.refresh_metrics()
        runtime._loop_task = asyncio.create_task(scheduler.run(), name="loadwise-scheduling-loop")
        log.info("scheduling %.2fs after process start", _since_process_start())
        runtime._loop_task.add_done_callback(_crash_if_failed)
        runtime._reconcile_task = asyncio.create_task(runtime._reconcile_forever())
        if config.http_port:
            runtime._http = await obs.start_http(
                config.http_host, config.http_port, runtime.healthy
            )
        return runtime

    async def _seed(self) -> None:
        # Concurrently: each list feeds its own kind, and the state accepts them in any order.
        counts = [len(keys) for keys in await asyncio.gather(*(i.list() for i in self.informers))]
        log.info("seeded state with %d namespaces, %d nodes and %d pods", *counts)

    def healthy(self) -> bool:
        tasks = [self._loop_task, *self._watch_tasks]
        return all(task is not None and not task.done() for task in tasks)

    async def reconcile(self) -> None:
        """Drop pods and nodes deleted without an event reaching us. Only objects known before
        the list began and absent from it are dropped: anything newer came from the watch."""
        state = self.scheduler.state
        pods_before, nodes_before = set(state.pods), set(state.nodes)
        transport = self.transport
        listed_pods = await Informer(transport, "/api/v1/pods", ignore, uid_of).list()
        listed_nodes = await Informer(transport, "/api/v1/nodes", ignore).list()
        gone_pods, gone_nodes = pods_before - listed_pods, nodes_before - listed_nodes
        if state.drop_missing(gone_pods, gone_nodes):
            log.warning(
                "reconcile dropped %d pod(s) and %d node(s) whose deletion was not seen",
                len(gone_pods),
                len(gone_nodes),
            )
            self.scheduler.queue.move_all_to_active()

    async def _reconcile_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reconcile_interval)
            try:
                await self.reconcile()
            except Exception as exc:  # the next round tries again
                log.warning("reconcile failed: %r", exc)

    async def refresh_metrics(self) -> None:
        for name, cache in self.scheduler.sources.items():
            if await cache.refresh_if_due():
                ok = cache.last_error is None
                obs.METRICS_REFRESH.labels(name, "ok" if ok else "error").inc()
                obs.SOURCE_UP.labels(name).set(1 if ok else 0)
                obs.FRESH_NODES.labels(name).set(len(cache.samples))
        self.scheduler.update_gauges()

    def policy_status(
        self, name: str, conditions: list[dict[str, Any]] | None
    ) -> tuple[dict[str, Any], bool] | None:
        """The metrics part of a policy's status, and whether it just became degraded."""
        scheduler = self.scheduler
        policy = next((p for p in scheduler.policies.policies() if p.name == name), None)
        if policy is None:
            return None
        cache = scheduler.sources.get(policy.spec.metrics.source)
        report = metrics_report(policy, cache, scheduler.state.nodes, time.time())
        fields = status_fields(
            report,
            conditions,
            scheduler.scheduled_by_policy.get(name, 0),
            cache.last_success if cache is not None else None,
        )
        was_available = self._available.get(name, True)
        self._available[name] = report.available
        fields["conditions_message"] = report.message
        return fields, was_available and not report.available

    async def stop(self) -> None:
        for task in (self._loop_task, self._reconcile_task, *self._watch_tasks):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.scheduler.drain(), 10)
        await self.scheduler.events.stop()
        for cache in self.scheduler.sources.values():
            if isinstance(cache.source, PrometheusSource):
                await cache.source.close()
        if self._http is not None:
            await self._http.cleanup()
        await self.transport.close()
        await self.api.close()


def _since_process_start() -> float:
    """Seconds since this process started (from /proc; 0 where that is unavailable)."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            return float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _crash_if_failed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.critical("%s died", task.get_name(), exc_info=task.exception())
