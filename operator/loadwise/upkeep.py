"""Upkeep: the periodic tasks every replica runs beside the watches, leader or not: the
metrics refresh (the operator's own task, not a kopf timer: it runs whether or not any policy
exists, and an outage cannot end it), the API probe that tells a black hole from a quiet
cluster, the reconcile that drops objects deleted unseen, the audit of reservations, and the timer
that measures how long anything holds the event loop."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable

from . import observability as obs
from .config import Config
from .degradations import Degradations
from .framework import heat
from .kube.informer import Informer, ignore, uid_of
from .kube.transport import REQUEST_TIMEOUT, Http
from .scheduler.scheduler import Scheduler
from .usage.utilisation_stats import STATS, utilisation_stats

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 2.0  # at most; never longer than the probe interval
PROBE_FAILURES = 2  # consecutive failed probes before the API server counts as unreachable
AUDIT_INTERVAL = 5.0  # seconds between audits of the scheduler's reservations
LOOP_TICK = 0.1  # seconds between two wake-ups of the loop-lag timer


class Upkeep:
    def __init__(
        self,
        config: Config,
        scheduler: Scheduler,
        transport: Http,
        degradations: Degradations,
        watched: Callable[[], Iterable[Informer]],
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.transport = transport
        self.degradations = degradations
        self.watched = watched  # every running watch: restarted when the network comes back
        self.api_down_since: float | None = None  # monotonic time of the first failed probe
        self.last_refresh = time.monotonic()

    async def refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics.interval)
            try:
                await self.refresh_metrics()
            except Exception:  # a bug must cost one refresh, never the refreshing
                log.exception("metrics refresh failed")
            self.last_refresh = time.monotonic()

    async def refresh_metrics(self) -> None:
        for name, cache in self.scheduler.usage.caches.items():
            began = time.monotonic()
            if await cache.refresh_if_due():
                obs.METRICS_REFRESH_SECONDS.labels(name).observe(time.monotonic() - began)
                ok = cache.last_error is None
                obs.METRICS_REFRESH.labels(name, "ok" if ok else "error").inc()
                obs.SOURCE_UP.labels(name).set(1 if ok else 0)
                if ok and cache.last_success is not None:
                    obs.LAST_REFRESH.labels(name).set(cache.last_success)
                # Judged as placement judges a pod no policy selects (the cluster default).
                default = self.scheduler.policies.for_pod({}, {}, self.scheduler.name)
                nodes = self.scheduler.state.nodes
                fresh = heat.fresh_samples(cache.samples, nodes, default, time.time())
                obs.FRESH_NODES.labels(name).set(len(fresh))
                obs.LEARNED_WORKLOADS.labels(name).set(cache.learned.workloads)
                spread = utilisation_stats(fresh.values())
                for resource in ("cpu", "memory"):
                    for stat in STATS:
                        gauge = obs.NODE_UTILISATION.labels(name, resource, stat)
                        gauge.set(spread.get((resource, stat), math.nan))
                if ok:
                    self.degradations.clear(f"metrics_source/{name}")
                else:
                    self.degradations.set(
                        f"metrics_source/{name}",
                        f"node metrics from {name} failed ({cache.last_error}): nodes are "
                        "scored by requests once their samples age out",
                    )
        self.last_refresh = time.monotonic()
        # A future sample covers placements up to about lag before its time: keep a margin.
        lag = max(
            (cache.lag for cache in self.scheduler.usage.caches.values()),
            default=self.config.metrics.lag or 0.0,
        )
        self.scheduler.trim_placements(keep=2 * lag + 4 * self.config.metrics.interval)
        self.scheduler.update_gauges()

    @staticmethod
    async def measure_loop_forever(tick: float = LOOP_TICK) -> None:
        """How late the loop wakes a timer, into loadwise_event_loop_lag_seconds: what a
        long refresh, list or decision costs everything else sharing the loop."""
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(tick)
            obs.LOOP_LAG.observe(max(0.0, time.perf_counter() - asked - tick))

    async def probe_forever(self) -> None:
        """Tell a silent network (a black hole) from a quiet cluster: watches cannot."""
        failures = 0
        first_failure = 0.0
        interval = self.config.replica.api_probe_interval
        while True:
            await asyncio.sleep(interval)
            started = time.monotonic()
            ok = await self._probe_api()
            if ok:
                if self.api_down_since is not None:
                    down = time.monotonic() - self.api_down_since
                    self.api_down_since = None
                    self.degradations.clear(
                        "api_unreachable", f"the API server was unreachable for {down:.0f}s"
                    )
                if failures:  # even a short gap (an API server restart) can leave a dead watch
                    self._drop_connections()
                failures = 0
                continue
            failures += 1
            if failures == 1:
                first_failure = started
            obs.API_UNREACHABLE_SECONDS.inc(interval if failures > 1 else 0)
            if failures >= PROBE_FAILURES and self.api_down_since is None:
                self.api_down_since = first_failure
                self.degradations.set(
                    "api_unreachable",
                    f"the API server has not answered for {time.monotonic() - first_failure:.0f}s"
                    ": watches reconnect, binds wait",
                )
                self._drop_connections()  # hung requests and watches fail, and are retried

    def _drop_connections(self) -> None:
        # Closing a session does not wake a reader blocked on a streaming response (aiohttp
        # 3.14), so each watch is restarted explicitly; requests in flight hit their timeouts.
        self.transport.reset()
        for informer in self.watched():
            informer.restart()

    async def _probe_api(self) -> bool:
        try:
            async with asyncio.timeout(min(PROBE_TIMEOUT, self.config.replica.api_probe_interval)):
                await self.transport.request("GET", "/readyz")
            return True  # any answer: the network and the server are there
        except Exception:
            return False

    async def reconcile(self) -> None:
        """Drop pods and nodes deleted without an event reaching us, by the same path as a
        watch's relist. What appeared while the lists ran came from the watch: it counts as
        listed."""
        scheduler = self.scheduler
        state, queue = scheduler.state, scheduler.queue
        pods_before = set(state.pods) | set(queue.uids())
        nodes_before = set(state.nodes)
        transport = self.transport
        listed_pods = await Informer(transport, "/api/v1/pods", ignore, uid_of).list()
        listed_nodes = await Informer(transport, "/api/v1/nodes", ignore).list()
        pods_now = set(state.pods) | set(queue.uids())
        dropped = scheduler.relisted_pods(listed_pods | (pods_now - pods_before))
        dropped += scheduler.relisted_nodes(listed_nodes | (set(state.nodes) - nodes_before))
        if dropped:
            log.warning(
                "reconcile dropped %d pod(s) and node(s) whose deletion was not seen", dropped
            )

    @property
    def reservation_bound(self) -> float:
        """How long a reservation may wait for its bind to settle: the bind's timeout plus the
        longest backoff."""
        return float(REQUEST_TIMEOUT.total or 30.0) + self.config.scheduling.max_backoff

    def audit_reservations(self) -> None:
        released = self.scheduler.audit_reservations(self.reservation_bound)
        if released:
            self.degradations.set(
                "stale_reservations",
                f"{released} reservation(s) had no bind settling them within "
                f"{self.reservation_bound:.0f}s: released and their pods queued again",
            )
        else:
            self.degradations.clear(
                "stale_reservations", "every reservation is settled by its bind again"
            )

    async def audit_forever(self) -> None:
        while True:
            await asyncio.sleep(AUDIT_INTERVAL)
            self.audit_reservations()

    async def reconcile_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.replica.reconcile_interval)
            try:
                await self.reconcile()
            except Exception as exc:  # the next round tries again
                log.warning("reconcile failed: %r", exc)
