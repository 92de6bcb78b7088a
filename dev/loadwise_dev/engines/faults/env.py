"""The benchmark's environment: a control plane, Prometheus, nodes, and loadwise replicas behind
proxies it can break."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from loadwise.config import Config

from ... import manifests
from ...cluster import LocalCluster, wait_for
from ...controlplane import ControlPlane, kubeconfig
from ...fault_proxy import ThreadedTcpProxy
from ...kube import Kube, KubeError
from ...replicas import Replica, Sampler
from ...truth import Truth
from .model import (
    LEASE_NAME,
    LEASE_NAMESPACE,
    NS,
    POLICIES,
    SCHEDULER,
    SYSTEM_NS,
    Row,
    Settings,
)
from .timeline import Timeline, Watcher

log = logging.getLogger(__name__)


class Env:
    """Everything one row runs on."""

    def __init__(self, settings: Settings, row: Row) -> None:
        self.settings = settings
        self.row = row
        self.rng = random.Random(f"{settings.seed}-{row.name}")
        extra = [] if row.watch_cache else ["--watch-cache=false"]
        # KWOK plays the nodes' kubelets and serves their usage (kwok_usage.py).
        self.cluster = LocalCluster(cp=ControlPlane(apiserver_args=extra), kwok_usage=True)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"loadwise-faults-{row.name}-"))
        self.prom_proxy: ThreadedTcpProxy | None = None
        self.api_proxy: ThreadedTcpProxy | None = None
        self.replicas: list[Replica] = []
        self.retired: list[Replica] = []  # killed or stopped by the harness
        self.sampler = Sampler(self.replicas)
        self.timeline = Timeline()
        self.watchers: list[Watcher] = []
        self.kube: Kube | None = None
        self.created: dict[str, str] = {}  # pod name -> uid, ours and meant to be scheduled
        self.create_errors: dict[str, int] = {}
        self.node_names: list[str] = []
        self.expected_usage: dict[str, float] = {}
        self.operator_kubeconfig = self.workdir / "operator.kubeconfig"
        self.blockers: list[socket.socket] = []
        self._counter = 0

    @property
    def cp(self) -> ControlPlane:
        return self.cluster.cp

    @property
    def k(self) -> Kube:
        assert self.kube is not None
        return self.kube

    # set-up ------------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(self.cluster.start)
        cluster = self.cluster
        assert cluster.prometheus is not None
        self.prom_proxy = ThreadedTcpProxy("127.0.0.1", cluster.prometheus.port)
        self.prom_proxy.up()
        if self.row.api_proxy:
            self.api_proxy = ThreadedTcpProxy("127.0.0.1", self.cp.apiserver_port)
            self.api_proxy.up()
        server = self.api_proxy.https_url if self.api_proxy else self.cp.server
        self.operator_kubeconfig.write_text(kubeconfig(server, self.cp.ca_file, self.cp.token))
        self.kube = cluster.kube(pool=128)
        k = self.kube
        for name in (NS, SYSTEM_NS):
            await k.create("/api/v1/namespaces", {"metadata": {"name": name}})
        if self.row.crd_before_start:
            await self.install_policy_crd()
        await self.add_nodes()
        for name in (NS, SYSTEM_NS):
            await cluster.wait_namespace(k, name)
        self.watchers = [
            await Watcher(
                self.cp.server,
                self.cp.token,
                self.cp.ca_file,
                f"/api/v1/namespaces/{NS}/pods",
                self.timeline.on_pod,
            ).start(),
            await Watcher(
                self.cp.server,
                self.cp.token,
                self.cp.ca_file,
                f"/api/v1/namespaces/{NS}/events",
                self.timeline.on_event,
            ).start(),
        ]
        await cluster.wait_metrics(self.expected_usage, tolerance=0.05)
        self.sampler.start()

    async def install_policy_crd(self) -> None:
        await self.cluster.install_crd(self.k)
        await self.k.create(
            POLICIES,
            {
                "apiVersion": "loadwise.io/v1alpha1",
                "kind": "SchedulingPolicy",
                "metadata": {"name": "default"},
                "spec": {},
            },
        )

    async def add_nodes(self) -> None:
        s = self.settings
        self.node_names = [f"node-{i:03d}" for i in range(s.nodes)]
        self.expected_usage = {}
        for i, name in enumerate(self.node_names):
            usage = 0.1 + 0.5 * (i % 6) / 5  # 10-60 % background CPU
            self.expected_usage[name] = usage
            await self.cluster.add_node(
                self.k,
                name,
                cpu_usage=usage,
                mem_usage=0.3,
                cpu=str(s.node_cpu),
                memory=f"{s.node_memory_gi}Gi",
            )

    @property
    def queries(self) -> Config:
        """The cluster's Prometheus preset and queries (with its short windows)."""
        return self.cluster.operator_config()

    def settings_env(self, leader_elect: bool) -> dict[str, str]:
        s = self.settings
        assert self.prom_proxy is not None
        env = {
            "LOADWISE_METRICS_SOURCES": "prometheus",
            "LOADWISE_PROMETHEUS_URL": self.prom_proxy.url,
            "LOADWISE_PROMETHEUS_PRESET": self.queries.sources.prometheus.preset,
            "LOADWISE_PROMETHEUS_CPU_QUERY": self.queries.sources.prometheus.cpu_query,
            "LOADWISE_PROMETHEUS_MEMORY_QUERY": self.queries.sources.prometheus.memory_query,
            "LOADWISE_METRICS_INTERVAL": str(s.metrics_interval),
            "LOADWISE_METRICS_LAG": "6",
            "LOADWISE_LEADER_ELECT": "true" if leader_elect else "false",
            "LOADWISE_LEASE_NAME": LEASE_NAME,
            "LOADWISE_LEASE_NAMESPACE": LEASE_NAMESPACE,
            "LOADWISE_LEASE_DURATION": str(s.lease_duration),
            "LOADWISE_RENEW_DEADLINE": str(s.renew_deadline),
            "LOADWISE_RETRY_PERIOD": str(s.retry_period),
            "LOADWISE_POD_NAMESPACE": SYSTEM_NS,
            "LOADWISE_LOG_LEVEL": s.log_level,
        }
        if s.product:
            env["PYTHONPATH"] = s.product
        return env

    async def add_replica(self, start: bool = True) -> Replica:
        identity = f"replica-{len(self.replicas) + len(self.retired) + 1}"
        replica = Replica(
            identity,
            self.operator_kubeconfig,
            {**self.settings_env(self.row.leader_elect), "LOADWISE_POD_NAME": identity},
            self.workdir,
        )
        # The replica's own Pod (as a Deployment would have made), for operator-level events
        # and conditions; nobody schedules it.
        body = manifests.pod(identity, namespace=SYSTEM_NS, scheduler_name="nobody")
        with contextlib.suppress(KubeError):
            await self.k.create(f"/api/v1/namespaces/{SYSTEM_NS}/pods", body)
        self.replicas.append(replica)
        if start:
            replica.start()
        return replica

    def retire(self, replica: Replica) -> None:
        if replica in self.replicas:
            self.replicas.remove(replica)
        self.retired.append(replica)

    def take_ports(self) -> None:
        for replica in self.replicas:
            blocker = socket.socket()
            blocker.bind(("127.0.0.1", replica.http_port))
            blocker.listen(1)
            self.blockers.append(blocker)

    def release_ports(self) -> None:
        for blocker in self.blockers:
            blocker.close()
        self.blockers = []

    # reading the cluster -----------------------------------------------------------------------
    async def lease_holder(self) -> str | None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}"
        try:
            lease = await self.k.get(path)
        except (KubeError, aiohttp.ClientError, OSError):
            return None
        return (lease.get("spec") or {}).get("holderIdentity") or None

    async def truth(self, events: bool = True) -> Truth:
        k = self.k
        pods, nodes = await asyncio.gather(k.list("/api/v1/pods"), k.list("/api/v1/nodes"))
        return Truth(pods, nodes, await k.list("/api/v1/events") if events else [], SCHEDULER)

    def leader_replica(self, holder: str | None) -> Replica | None:
        return next((r for r in self.replicas if r.identity == holder), None)

    # creating pods -----------------------------------------------------------------------------
    async def create_pod(self, body: dict[str, Any], deadline: float, count: bool = True) -> bool:
        """Create, retrying through outages (connection errors, 5xx, 429) until `deadline`.
        True when it exists (a retry answered 409 for our own earlier attempt counts)."""
        path = f"/api/v1/namespaces/{body['metadata']['namespace']}/pods"
        name = body["metadata"]["name"]
        attempted = False
        while True:
            try:
                created = await self.k.create(path, body)
                if count:
                    self.created[name] = created["metadata"]["uid"]
                return True
            except KubeError as exc:
                if exc.status == 409 and attempted:
                    with contextlib.suppress(Exception):
                        existing = await self.k.get(f"{path}/{name}")
                        if count:
                            self.created[name] = existing["metadata"]["uid"]
                    return True
                if exc.status < 500 and exc.status != 429:
                    message = exc.body.get("message") if isinstance(exc.body, dict) else exc.body
                    key = f"{exc.status} {str(message)[:160]}"
                    self.create_errors[key] = self.create_errors.get(key, 0) + 1
                    return False
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass
            attempted = True
            if time.monotonic() > deadline:
                self.create_errors["timeout"] = self.create_errors.get("timeout", 0) + 1
                return False
            await asyncio.sleep(0.2)

    def burst_bodies(self, fill: float) -> list[dict[str, Any]]:
        s = self.settings
        total = s.nodes * s.node_cpu * 1000 * fill
        bodies: list[dict[str, Any]] = []
        used = 0
        while used < total:
            cpu = self.rng.choice([100, 200, 300, 400, 500])
            memory = self.rng.choice([128, 256, 384, 512])
            name = f"burst-{len(bodies):05d}"
            bodies.append(manifests.pod(name, namespace=NS, cpu=f"{cpu}m", memory=f"{memory}Mi"))
            used += cpu
        return bodies

    async def paced(
        self, bodies: list[dict[str, Any]], seconds: float, start_delay: float = 0.0
    ) -> None:
        """Create `bodies` evenly over `seconds`, each retried through outages."""
        await asyncio.sleep(start_delay)
        started = time.monotonic()
        step = seconds / max(1, len(bodies))
        sem = asyncio.Semaphore(32)

        async def one(i: int, body: dict[str, Any]) -> None:
            delay = started + i * step - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                await self.create_pod(body, time.monotonic() + 240)

        await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))

    async def trickle(self, every: float = 2.0) -> None:
        """Small pods until cancelled (during a fault: what is scheduled meanwhile, and how)."""
        tasks = []
        try:
            for i in range(10**6):
                body = manifests.pod(f"during-{i:04d}", namespace=NS, cpu="20m", memory="32Mi")
                tasks.append(asyncio.create_task(self.create_pod(body, time.monotonic() + 240)))
                await asyncio.sleep(every)
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)

    def probe_bodies(self) -> list[dict[str, Any]]:
        s = self.settings
        count = max(1, int(s.probe_seconds * s.probe_rate))
        self._counter += 1
        return [
            manifests.pod(f"probe{self._counter}-{i:04d}", namespace=NS, cpu="50m", memory="64Mi")
            for i in range(count)
        ]

    async def warm_up(self, timeout: float = 60.0) -> float | None:
        """One pod bound (seconds it took), or None."""
        self._counter += 1
        name = f"warmup-{self._counter}"
        started = time.monotonic()
        await self.create_pod(
            manifests.pod(name, namespace=NS, cpu="10m", memory="16Mi"), started + 30
        )

        async def bound() -> bool:
            return any(b.name == name for b in self.timeline.binds)

        try:
            await wait_for(bound, timeout, interval=0.05, what="warm-up pod bound")
        except TimeoutError:
            return None
        return time.monotonic() - started

    async def wait_leader(self, timeout: float = 30.0) -> str | None:
        async def holder() -> str | None:
            found = await self.lease_holder()
            return found if found and self.leader_replica(found) else None

        try:
            return await wait_for(holder, timeout, interval=0.1, what="a leader")
        except TimeoutError:
            return None

    # tear-down ---------------------------------------------------------------------------------
    async def stop(self) -> None:
        await self.sampler.stop()
        for watcher in self.watchers:
            await watcher.stop()
        self.release_ports()
        for replica in [*self.replicas, *self.retired]:
            await asyncio.to_thread(replica.stop, 10.0)
        for proxy in (self.api_proxy, self.prom_proxy):
            if proxy is not None:
                proxy.close()
        if self.kube is not None:
            await self.kube.close()
        await asyncio.to_thread(self.cluster.stop)
        if os.environ.get("LOADWISE_KEEP_LOGS"):
            log.warning("replica logs kept in %s", self.workdir)
        else:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)


# --- faults --------------------------------------------------------------------------------------
