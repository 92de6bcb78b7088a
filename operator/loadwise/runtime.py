"""Runtime: supervises one replica. It starts the parts `components.build` made (held in
kopf's memo), keeps their tasks running, follows leadership, answers health, and stops them.

Start-up is all-or-nothing: the HTTP endpoint is bound first, then namespaces, nodes, pods and
SchedulingPolicies are listed (the first decision sees every pod on every node and the user's
policies; kube-scheduler waits for its caches for the same reason) and node metrics are fetched
once; if any step fails, everything already started is stopped before the caller retries.

Then every replica runs the same background tasks and keeps its state warm: the watches, the
policy watch and the upkeep (upkeep.py: metrics refresh, API probe, reconcile, reservation
audit). Only the leader (see kube/leader.py) schedules, binds and writes statuses; a new leader
first lists pods again, so it has seen every bind its predecessor made before it decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

from . import secure_serving as serving
from .components import (
    Informers,
    OptionalInformer,
    api_client,
    build,
    identity_of,
    informers,
    operator_object,
)
from .config import Config
from .degradations import Degradations
from .kube import prefetch
from .kube.informer import Informer
from .kube.leader import LeaderElector
from .kube.transport import ApiError, Http
from .policies.policywatch import PolicyWatch
from .reporting.reporter import Reporter
from .scheduler.rebalancing.move_store import ledger_store
from .scheduler.rebalancing.rebalancer import Rebalancer
from .scheduler.scheduler import Scheduler
from .scheduler.shadow import ShadowTrial
from .scheduler.soft_taints import SoftTaints
from .upkeep import AUDIT_INTERVAL, Upkeep

log = logging.getLogger(__name__)


# At start-up, scheduling waits at most this long for the windows to be filled from history.
BACKFILL_WAIT = 15.0
STALL_LIMIT = 180.0  # a watch silent this long (no event, bookmark or reconnect) is dead


class Runtime:
    def __init__(
        self,
        config: Config,
        api: client.ApiClient,
        transport: Http,
        scheduler: Scheduler,
        parts: Informers | None = None,
    ) -> None:
        self.config = config
        self.api = api
        self.transport = transport
        self.scheduler = scheduler
        self.identity = scheduler.binder.instance or identity_of(config)
        self.degradations = Degradations()
        self.parts = parts or informers(transport, scheduler, config)
        self.informers = self.parts.required  # all listed before the first decision
        self.budget_informer = self.parts.budgets
        self.pod_informer = self.parts.pods
        self.optional: list[Informer] = [p.informer for p in self.parts.optional]
        self.policies = PolicyWatch(transport, scheduler.policies, self.degradations)
        self.reporter = Reporter(
            transport,
            scheduler.binder,
            scheduler,
            self.policies,
            self.degradations,
            operator_object(config),
        )
        self.rebalancer = Rebalancer(
            transport,
            scheduler.binder,
            scheduler,
            ledger_store(transport, config),
            config.scheduling.rebalance_evictions,
        )
        settings = config.scheduling
        self.soft_taints = (
            SoftTaints(
                scheduler,
                transport,
                settings.soft_taint_hot_refreshes,
                settings.soft_taint_cool_refreshes,
            )
            if settings.soft_taints
            else None
        )
        # A shadow trial schedules nothing and writes nothing (no Lease either): it judges the
        # pods another scheduler places, in every replica.
        self.shadow = ShadowTrial(scheduler, settings.shadow_of) if settings.shadow else None
        if self.shadow is not None:
            scheduler.watch.watcher = self.shadow
        self.elector: LeaderElector | None = None
        if config.election.leader_elect and self.shadow is None:
            self.elector = LeaderElector(
                transport,
                config.election.lease_namespace,
                config.election.lease_name,
                self.identity,
                config.election.lease_duration,
                config.election.renew_deadline,
                config.election.retry_period,
                on_elected=self._elected,
                on_lost=self._lost,
            )
        self.started = False
        self.leading = False  # scheduling (after the new leader's resync)
        self.upkeep = Upkeep(
            config,
            scheduler,
            transport,
            self.degradations,
            lambda: (*self._watched(), self.policies.informer),
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._lead_task: asyncio.Task[None] | None = None
        self._servers: list[web.AppRunner] = []  # the HTTPS and the plain HTTP port

    # --- start and stop ----------------------------------------------------------------------
    @classmethod
    async def start(cls, config: Config) -> Runtime:
        log.debug("start-up began %.2fs after process start", _since_process_start())
        api = await api_client(pool_size=1)  # configuration and credentials; requests: transport
        runtime: Runtime | None = None
        try:
            seeded = asyncio.Event()
            built = build(config, api, seeded)
            runtime = cls(config, api, built.transport, built.scheduler, built.informers)
            # First: a port taken fails start-up before anything runs.
            if config.serving.secure_port:
                runtime._servers.append(
                    await serving.serve(
                        config.serving.http_host,
                        config.serving.secure_port,
                        runtime.health,
                        runtime.readiness,
                        auth=serving.DelegatedAuth(built.transport),
                        tls=serving.server_tls(
                            config.serving.tls_cert_file, config.serving.tls_private_key_file
                        ),
                        shadow=runtime._shadow_report(),
                    )
                )
            if config.serving.http_port:  # plain and open: local development only
                runtime._servers.append(
                    await serving.serve(
                        config.serving.http_host,
                        config.serving.http_port,
                        runtime.health,
                        runtime.readiness,
                        shadow=runtime._shadow_report(),
                    )
                )
            # The first metrics requests go out while the state is listed; their answers are
            # read against the state once it is (`seeded`).
            first_refresh = asyncio.create_task(runtime.upkeep.refresh_metrics())
            try:
                await runtime._seed()
            except BaseException:
                first_refresh.cancel()
                with contextlib.suppress(BaseException):
                    await first_refresh
                raise
            seeded.set()
            await first_refresh
            # A replica that starts in a burst (a restart, an upgrade) judges nodes by full
            # windows from its first decision: the backfill, bounded (it goes on after that).
            caches = runtime.scheduler.usage.caches.values()
            await asyncio.gather(*(c.fill_windows(BACKFILL_WAIT) for c in caches))
            runtime._start_tasks()
        except BaseException:
            if runtime is not None:
                await runtime.stop()
            else:
                await api.close()
            raise
        runtime.started = True
        log.info(
            "%s started %.2fs after process start (leader election %s)",
            runtime.identity,
            _since_process_start(),
            "on" if runtime.elector else "off: scheduling at once",
        )
        return runtime

    async def _seed(self) -> None:
        # Concurrently: each list feeds its own kind, and the state accepts them in any order.
        began, cpu = time.monotonic(), time.process_time()
        lists = asyncio.gather(*(informer.seed(from_cache=True) for informer in self.informers))
        try:
            keys, _, _ = await asyncio.gather(lists, self.policies.seed(), self._seed_optional())
        finally:
            prefetch.abandon_all()  # a start-up retry lists afresh
        budgets = keys[-1:] if self.budget_informer is not None else []
        log.info(
            "seeded state with %d namespaces, %d nodes, %d pods, %d services and workload "
            "controllers, %d PodDisruptionBudgets and %d SchedulingPolicies in %.2fs (%.2fs of "
            "CPU)",
            *(len(k) for k in keys[:3]),
            sum(len(k) for k in keys[3 : len(keys) - len(budgets)]),  # Services, controllers
            sum(len(k) for k in budgets),  # none listed with preemption off
            len(self.policies.objects),
            time.monotonic() - began,
            time.process_time() - cpu,
        )

    async def _seed_optional(self) -> None:
        """List the optional informers; those not served (or not granted) are not watched."""

        async def seed(part: OptionalInformer) -> Informer | None:
            try:
                await part.informer.seed()
            except ApiError as exc:
                if exc.status not in (403, 404):
                    raise
                log.info(
                    "%s not readable (HTTP %s): %s", part.informer.path, exc.status, part.absent
                )
                part.on_absent()
                return None
            return part.informer

        seeded = await asyncio.gather(*(seed(part) for part in self.parts.optional))
        self.optional = [informer for informer in seeded if informer is not None]

    def _shadow_report(self) -> Callable[[], dict[str, Any]] | None:
        return self.shadow.report if self.shadow is not None else None

    def _watched(self) -> list[Informer]:
        return [*self.informers, *self.optional]

    def _start_tasks(self) -> None:
        for informer in self._watched():
            self._spawn(f"watch{informer.path}", informer.run())
        self._spawn("policy-watch", self.policies.run())
        upkeep = self.upkeep
        self._spawn("metrics-refresh", upkeep.refresh_forever())
        self._spawn("api-probe", upkeep.probe_forever())
        self._spawn("reconcile", upkeep.reconcile_forever())
        self._spawn("reservation-audit", upkeep.audit_forever())
        self._spawn("loop-lag", upkeep.measure_loop_forever())
        if self.shadow is not None:
            log.info("shadow trial of %s: scheduling nothing, writing nothing", self.shadow.watched)
        elif self.elector is not None:
            self._spawn("leader-election", self.elector.run())
        else:
            self._elected()

    def _spawn(self, name: str, coro: Any) -> None:
        task = asyncio.create_task(coro, name=f"loadwise-{name}")
        task.add_done_callback(_crash_if_failed)
        self._tasks[name] = task

    async def stop(self) -> None:
        """Stop scheduling first, give the lease up (a standby takes over at once), then the
        rest. Safe to call on a partly started runtime."""
        await self._stop_leading()
        if self.elector is not None:
            self.elector.stopping = True
        elector_task = self._tasks.pop("leader-election", None)
        if elector_task is not None:
            elector_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await elector_task
        if self.elector is not None:
            await self.elector.release()
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.scheduler.events.flush(), 5)
        await self.scheduler.events.stop()
        await self.scheduler.close()
        for cache in self.scheduler.usage.caches.values():
            await cache.close()
        for server in self._servers:
            await server.cleanup()
        await self.transport.close()
        await self.api.close()

    # --- leadership --------------------------------------------------------------------------
    def _elected(self) -> None:
        self._lead_task = asyncio.create_task(self._lead(), name="loadwise-leading")
        self._lead_task.add_done_callback(_crash_if_failed)

    def _lost(self) -> None:
        """Stop binding at once (synchronously: nothing new is sent after this returns)."""
        self.leading = False
        if self._lead_task is not None:
            self._lead_task.cancel()
        self.scheduler.abandon()
        self.reporter.forget_gauges()  # at once; the reporter's task does it again as it ends
        self.rebalancer.forget()
        if self.soft_taints is not None:
            self.soft_taints.forget()

    async def _lead(self) -> None:
        elector = self.elector
        if elector is not None and elector.acquired_from not in (None, self.identity):
            # The previous leader's last binds may not have reached our watch yet: list pods
            # again (kubernetes/kubernetes#137308 is kube-scheduler over-committing for this).
            # Not needed when we created the Lease: nobody was leading before.
            started = time.monotonic()
            await self.pod_informer.resync()
            log.info("caught up with the pods in %.2fs; scheduling", time.monotonic() - started)
        # Trust no reservation from before this term: one without a bind behind it is released
        # (the previous term's were, as it ended; this checks that it is so).
        self.scheduler.audit_reservations(bound=0.0)
        self.leading = True
        try:
            interval = self.config.metrics.interval
            tainting = () if self.soft_taints is None else (self.soft_taints.run(interval),)
            await asyncio.gather(
                self.scheduler.run(),
                self.reporter.run(interval),
                self.rebalancer.run(interval),
                *tainting,
            )
        finally:
            self.leading = False

    async def _stop_leading(self) -> None:
        task, self._lead_task = self._lead_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.scheduler.drain(), 10)
            self.scheduler.abandon()
        self.leading = False

    # --- health ------------------------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        """Unhealthy when something a restart would fix has died or stalled."""
        if not self.started:
            return True, "starting"
        problems = [f"{name} stopped" for name, task in self._tasks.items() if task.done()]
        lead = self._lead_task
        if lead is not None and lead.done() and not lead.cancelled():
            problems.append("scheduling loop stopped")
        now = time.monotonic()
        watched = self._watched()
        if self.policies.crd_present:
            watched.append(self.policies.informer)
        for informer in watched:
            if informer.stalled_for(now) > STALL_LIMIT:
                problems.append(
                    f"watch of {informer.path} silent for {informer.stalled_for(now):.0f}s"
                )
        held = self.scheduler.oldest_reservation()
        if held > self.upkeep.reservation_bound + 2 * AUDIT_INTERVAL:
            problems.append(f"a reservation held {held:.0f}s with no bind answer (not released)")
        timeout = max((s.refresh_timeout() for s in self.config.enabled_sources()), default=0.0)
        refresh_limit = 3 * self.config.metrics.interval + 2 * timeout
        last_refresh = self.upkeep.last_refresh
        if now - last_refresh > refresh_limit:
            problems.append(f"metrics refresh stalled for {now - last_refresh:.0f}s")
        return (False, "; ".join(problems)) if problems else (True, "ok")

    def readiness(self) -> tuple[bool, str]:
        if not self.started:
            return False, "starting: listing the cluster"
        degraded = self.degradations.summary()
        suffix = f" (degraded: {degraded})" if degraded else ""
        if self.policies.crd_present is False:
            return False, self.degradations.active["crd_missing"].message
        if self.shadow is not None:
            return True, f"shadow trial of {self.shadow.watched} {self.identity}{suffix}"
        if self.elector is None or self.leading:
            return True, f"leader {self.identity}{suffix}"
        if self.elector.is_leader:
            return True, f"leader {self.identity}, catching up{suffix}"
        leader = self.elector.leader or "unknown"
        return True, f"standby {self.identity}, synced; leader {leader}{suffix}"


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
