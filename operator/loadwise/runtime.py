"""Runtime: builds the scheduler's services once at startup (held in kopf's memo) and stops them.

Before the loop starts it lists nodes and pods as raw JSON, so the first decisions already count
every pod on every node (kube-scheduler waits for its informer caches for the same reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from . import observability as obs
from .binder import Binder
from .config import Config
from .metrics.cache import MetricsCache, MetricsSource
from .metrics.prometheus import PrometheusSource
from .queue import SchedulingQueue
from .scheduler import Scheduler

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


def metrics_source(config: Config) -> MetricsSource | None:
    if config.metrics_source == "none":
        return None
    return PrometheusSource(
        config.prometheus_url,
        cpu_query=config.prometheus_cpu_query,
        memory_query=config.prometheus_memory_query,
        node_label=config.prometheus_node_label,
        lag=config.metrics_lag,
        timeout=config.prometheus_timeout,
    )


async def list_raw(api: client.ApiClient, path: str, page: int = 1000) -> AsyncIterator[Any]:
    """Items of a list call as plain dicts, page by page (no model objects: they are slow)."""
    token = None
    while True:
        query: list[tuple[str, Any]] = [("limit", page)]
        if token:
            query.append(("continue", token))
        resp = await api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        try:
            body = json.loads(await resp.read())
        finally:
            resp.release()
        if resp.status != 200:
            raise RuntimeError(f"listing {path} failed: HTTP {resp.status}: {body}")
        for item in body.get("items") or ():
            yield item
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


class Runtime:
    def __init__(self, config: Config, api: client.ApiClient, scheduler: Scheduler) -> None:
        self.config = config
        self.api = api
        self.scheduler = scheduler
        self._loop_task: asyncio.Task[None] | None = None
        self._http: web.AppRunner | None = None

    @classmethod
    async def start(cls, config: Config) -> Runtime:
        api = await api_client(pool_size=config.bind_concurrency + 8)
        source = metrics_source(config)
        scheduler = Scheduler(
            config.scheduler_name,
            Binder(api, config.scheduler_name),
            MetricsCache(source, config.metrics_interval),
            SchedulingQueue(
                config.initial_backoff, config.max_backoff, config.unschedulable_timeout
            ),
            bind_concurrency=config.bind_concurrency,
            failure_event_interval=config.failure_event_interval,
        )
        runtime = cls(config, api, scheduler)
        await runtime._seed()
        if source is not None:
            await scheduler.metrics.refresh_if_due()
        runtime._loop_task = asyncio.create_task(scheduler.run(), name="loadwise-scheduling-loop")
        runtime._loop_task.add_done_callback(_crash_if_failed)
        if config.http_port:
            runtime._http = await obs.start_http(config.http_host, config.http_port)
        return runtime

    async def _seed(self) -> None:
        nodes = pods = 0
        async for namespace in list_raw(self.api, "/api/v1/namespaces"):
            self.scheduler.on_namespace_event(None, namespace)
        async for node in list_raw(self.api, "/api/v1/nodes"):
            self.scheduler.on_node_event(None, node)
            nodes += 1
        async for pod in list_raw(self.api, "/api/v1/pods"):
            self.scheduler.on_pod_event(None, pod)
            pods += 1
        log.info("seeded state with %d nodes and %d pods", nodes, pods)

    async def refresh_metrics(self) -> None:
        cache = self.scheduler.metrics
        if await cache.refresh_if_due():
            obs.METRICS_REFRESH.labels("ok" if cache.last_error is None else "error").inc()
            obs.FRESH_NODES.set(len(cache.samples))
        self.scheduler.update_gauges()

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await self.scheduler.drain()
        source = self.scheduler.metrics.source
        if isinstance(source, PrometheusSource):
            await source.close()
        if self._http is not None:
            await self._http.cleanup()
        await self.api.close()


def _crash_if_failed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.critical("scheduling loop died", exc_info=task.exception())
