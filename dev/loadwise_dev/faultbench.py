"""Fault benchmark harness (issue 10): real faults injected into a real control plane while two
operator replicas (real processes, leader election unless a row says otherwise) schedule a burst
into a nearly full cluster; the result is read from the API server's truth.

Used by `bench/faults` (every row, a table and JSON), `bench/soak` and tests/cluster/test_faults.py
(small versions). One `Env` per row: its own control plane (etcd, kube-apiserver,
controller-manager), usage exporter and Prometheus, a TCP proxy in front of Prometheus and
(optionally) one in front of the API server for the operators only, the replicas, a sampler of
their /metrics, and watches of pods and events that time-stamp binds and Scheduled events as the
harness sees them.

Per row: warm up (one pod bound), start the burst (paced), inject the fault mid-burst, end it,
create probe pods at a steady rate (so "first bind after the fault" and "first load-aware bind
after it" are measurable), let it settle, then measure:
- lost: pending pods of ours that would fit on some node by requests (truth.py's checker); a pod
  that fits nowhere because the cluster is full is not lost;
- bound_twice: more than one Scheduled event for one pod UID, or one naming another node;
- overcommitted_nodes: bound non-terminal pods' requests above allocatable (cpu, memory, pods,
  any resource);
- leaked_millicpu: each live replica's loadwise_accounted_cpu_millicores minus the requests of
  bound non-terminal pods on existing nodes (the leader's, and the standby's if it exports it);
- resume_s, metrics_resume_s, crashed, degradation_visible (a Warning event other than
  FailedScheduling since the fault began AND loadwise_degraded{reason}=1 in some scrape).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from . import manifests, oddities
from .cluster import LocalCluster, wait_for
from .controlplane import ControlPlane, kubeconfig
from .faults import ThreadedTcpProxy
from .kube import Kube, KubeError
from .prometheus_server import SIM_CPU_QUERY
from .replicas import Replica, Sampler, stop_background
from .truth import Truth, meta, spec

log = logging.getLogger(__name__)

NS = "faults"
SYSTEM_NS = "loadwise-system"
POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
SCHEDULER = "loadwise-scheduler"
LEASE_NAME = "loadwise-scheduler"
LEASE_NAMESPACE = "default"
BY_METRICS = re.compile(r"by metrics (\d+)s old")
EXPIRED_LOG = "expired; listing again"  # informer.py's log line on a 410 relist
STARTED_LOG = "after process start"  # runtime.py logs it once per started scheduling loop
STALE_LOG = "reservation of "  # scheduler.py's audit releasing a reservation no bind settled


# --- settings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    nodes: int = 20
    node_cpu: int = 4
    node_memory_gi: int = 16
    fill: float = 0.9  # burst requests / cluster CPU
    burst_seconds: float = 12.0
    probe_seconds: float = 10.0
    probe_rate: float = 4.0
    settle_quiet: float = 6.0
    settle_timeout: float = 60.0
    metrics_interval: float = 1.0
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    outage_short: float = 10.0
    outage_long: float = 90.0
    prometheus_outage: float = 90.0
    black_hole: float = 60.0
    restart_gap: float = 5.0
    port_hold: float = 15.0
    odd_pods: int = 1000
    odd_nodes: int = 12
    odd_policies: int = 14
    invalid_policies: int = 24
    seed: int = 1
    product: str | None = None  # a source tree to run the operators from (PYTHONPATH)
    log_level: str = "INFO"

    @classmethod
    def small(cls, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "nodes": 8,
            "burst_seconds": 6.0,
            "probe_seconds": 5.0,
            "settle_quiet": 4.0,
            "settle_timeout": 30.0,
            "outage_short": 5.0,
            "outage_long": 20.0,
            "prometheus_outage": 20.0,
            "black_hole": 20.0,
            "restart_gap": 3.0,
            "port_hold": 6.0,
            "odd_pods": 300,
            "odd_nodes": 6,
            "odd_policies": 7,
            "invalid_policies": 12,
        }
        values.update(overrides)
        return cls(**values)


@dataclass
class Row:
    name: str
    inject: Callable[[Env], Awaitable[Fault]]
    description: str = ""
    replicas: int = 2
    leader_elect: bool = True
    api_proxy: bool = False  # operators reach the API server through a cuttable proxy
    watch_cache: bool = True
    crd_before_start: bool = True
    ports_taken: bool = False
    fill: float | None = None  # default: Settings.fill
    burst_seconds: float | None = None  # default: Settings.burst_seconds
    expect_degradation: bool = True
    resume_target: float | None = 30.0  # seconds; None: no target
    takeover: bool = False  # resume_s counts binds by the new leader after the fault start
    probe_delay: float = 0.0
    metrics_age_check: bool = False  # "by metrics Ns old" must stay fresh after the fault


@dataclass
class Fault:
    start: float  # monotonic
    end: float
    wall_start: float  # Unix time (events carry wall-clock times)
    extra: dict[str, Any] = field(default_factory=dict)


# --- watches -------------------------------------------------------------------------------------
OnEvent = Callable[[str, dict[str, Any], float], None]


class Watcher:
    """List, then watch a path on the API server directly, reconnecting at once after errors and
    relisting on 410; `on_event(type, object, monotonic arrival time)`."""

    def __init__(
        self, server: str, token: str, ca_file: Path, path: str, on_event: OnEvent
    ) -> None:
        import ssl

        self.url = server + path
        self.on_event = on_event
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self.version = ""
        self.reconnects = 0
        self.relists = 0

    async def start(self) -> Watcher:
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=self._ssl),
            read_bufsize=2**21,
        )
        await self._list()
        self._task = asyncio.create_task(self._run())
        return self

    async def _list(self) -> None:
        assert self._session is not None
        token = ""
        while True:
            params = {"limit": "500"}
            if token:
                params["continue"] = token
            async with self._session.get(self.url, params=params) as resp:
                if resp.status != 200:
                    raise KubeError(resp.status, await resp.text())
                page = json.loads(await resp.read())
            now = time.monotonic()
            for item in page.get("items") or ():
                self.on_event("LISTED", item, now)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                self.version = page["metadata"]["resourceVersion"]
                return

    async def _run(self) -> None:
        assert self._session is not None
        while True:
            params = {
                "watch": "1",
                "allowWatchBookmarks": "true",
                "resourceVersion": self.version,
                "timeoutSeconds": "300",
            }
            gone = False
            try:
                async with self._session.get(
                    self.url, params=params, timeout=aiohttp.ClientTimeout(total=None)
                ) as resp:
                    if resp.status == 410:
                        gone = True
                    elif resp.status != 200:
                        raise KubeError(resp.status, await resp.text())
                    else:
                        while line := await resp.content.readline():
                            event = json.loads(line)
                            obj = event.get("object") or {}
                            if event.get("type") == "ERROR":
                                gone = obj.get("code") == 410
                                break
                            version = (obj.get("metadata") or {}).get("resourceVersion")
                            if version:
                                self.version = version
                            if event.get("type") != "BOOKMARK":
                                self.on_event(event["type"], obj, time.monotonic())
                if gone:
                    self.relists += 1
                    await self._list()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.reconnects += 1
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        await stop_background(self._task, self._session)


@dataclass
class Bind:
    t: float
    name: str
    uid: str
    node: str


@dataclass
class ScheduledEvent:
    t: float
    pod: str
    uid: str
    message: str
    instance: str


class Timeline:
    """Binds and Scheduled events as the harness saw them arrive."""

    def __init__(self) -> None:
        self.binds: list[Bind] = []
        self.bound_uids: set[str] = set()
        self.scheduled: list[ScheduledEvent] = []
        self._seen_events: set[str] = set()

    def on_pod(self, _: str, pod: dict[str, Any], t: float) -> None:
        node = spec(pod).get("nodeName")
        uid = meta(pod).get("uid", "")
        if node and uid not in self.bound_uids and spec(pod).get("schedulerName") == SCHEDULER:
            self.bound_uids.add(uid)
            self.binds.append(Bind(t, meta(pod)["name"], uid, node))

    def on_event(self, _: str, event: dict[str, Any], t: float) -> None:
        if event.get("reason") != "Scheduled":
            return
        key = meta(event).get("uid", "")
        if key in self._seen_events:
            return
        self._seen_events.add(key)
        involved = event.get("involvedObject") or {}
        self.scheduled.append(
            ScheduledEvent(
                t,
                involved.get("name", ""),
                involved.get("uid", ""),
                event.get("message") or "",
                str(event.get("reportingInstance") or ""),
            )
        )

    def first_bind_after(self, t: float) -> Bind | None:
        return next((b for b in self.binds if b.t >= t), None)

    def bind_time(self, uid: str) -> float | None:
        return next((b.t for b in self.binds if b.uid == uid), None)

    def first_load_aware_after(self, t: float) -> float | None:
        """When the first pod whose Scheduled event says `by metrics` was bound after `t`
        (its bind as seen by the pod watch; the event's arrival if the bind was not seen)."""
        times = []
        for event in self.scheduled:
            if "by metrics" not in event.message:
                continue
            when = self.bind_time(event.uid)
            when = event.t if when is None else when
            if when >= t:
                times.append(when)
        return min(times) if times else None

    def metrics_ages_after(self, t: float) -> list[int]:
        ages = []
        for event in self.scheduled:
            when = self.bind_time(event.uid) or event.t
            match = BY_METRICS.search(event.message)
            if when >= t and match:
                ages.append(int(match.group(1)))
        return ages

    def by_requests_between(self, start: float, end: float) -> int:
        return sum(
            1
            for e in self.scheduled
            if "by requests" in e.message and start <= (self.bind_time(e.uid) or e.t) <= end
        )

    def instances(self) -> set[str]:
        return {e.instance for e in self.scheduled}


# --- the environment -----------------------------------------------------------------------------
class Env:
    """Everything one row runs on."""

    def __init__(self, settings: Settings, row: Row) -> None:
        self.settings = settings
        self.row = row
        self.rng = random.Random(f"{settings.seed}-{row.name}")
        extra = [] if row.watch_cache else ["--watch-cache=false"]
        self.cluster = LocalCluster(cp=ControlPlane(apiserver_args=extra))
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

    def settings_env(self, leader_elect: bool) -> dict[str, str]:
        s = self.settings
        assert self.prom_proxy is not None
        env = {
            "LOADWISE_METRICS_SOURCES": "prometheus",
            "LOADWISE_PROMETHEUS_URL": self.prom_proxy.url,
            "LOADWISE_PROMETHEUS_CPU_QUERY": SIM_CPU_QUERY,
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
def _now_fault() -> Fault:
    t = time.monotonic()
    return Fault(t, t, time.time())


async def _kill_leader(env: Env, sig: int) -> Fault:
    holder = await env.lease_holder()
    leader = env.leader_replica(holder) or env.replicas[0]
    fault = _now_fault()
    fault.extra["old_leader"] = leader.identity
    fault.extra["lease_seen"] = holder is not None
    leader.signal(sig)
    env.retire(leader)
    others = {r.identity for r in env.replicas}

    async def new_holder() -> str | None:
        found = await env.lease_holder()
        return found if found in others else None

    async def exited() -> bool:
        if leader.alive:
            return False
        leader.exited_at = leader.exited_at or time.monotonic()
        return True

    try:
        await wait_for(exited, 30, interval=0.02, what="old leader exit")
    except TimeoutError:
        fault.extra["hung_after_signal"] = True
        leader.kill()
    fault.extra["old_exit_code"] = leader.returncode
    fault.extra["old_exit_s"] = (
        round(leader.exited_at - fault.start, 2) if leader.exited_at else None
    )
    try:
        await wait_for(new_holder, s_lease(env) + 15, interval=0.05, what="new lease holder")
        fault.extra["takeover_s"] = round(time.monotonic() - fault.start, 2)
        fault.extra["new_leader"] = await env.lease_holder()
    except TimeoutError:
        fault.extra["takeover_s"] = None
    fault.end = fault.start  # the fault is the kill itself
    return fault


def s_lease(env: Env) -> float:
    return env.settings.lease_duration


async def kill9(env: Env) -> Fault:
    fault = await _kill_leader(env, signal.SIGKILL)
    await env.add_replica()  # the Deployment starts a new pod
    return fault


async def sigterm(env: Env) -> Fault:
    fault = await _kill_leader(env, signal.SIGTERM)
    await env.add_replica()
    return fault


def _apiserver_down(
    seconds: Callable[[Settings], float], kill: bool = True
) -> Callable[[Env], Awaitable[Fault]]:
    """kill: SIGKILL (a crash; the outage window is exact). Otherwise SIGTERM, as a rolling
    restart stops it: kube-apiserver then drains for seconds before it exits; the down time
    counts from the signal."""

    async def inject(env: Env) -> Fault:
        fault = _now_fault()
        await asyncio.to_thread(env.cp.stop_apiserver, kill, 60.0)
        fault.extra["stopped_s"] = round(time.monotonic() - fault.start, 2)
        await asyncio.sleep(max(0.0, seconds(env.settings) - (time.monotonic() - fault.start)))
        ready = await asyncio.to_thread(env.cp.start_apiserver)
        fault.end = time.monotonic()
        fault.extra["apiserver_start_s"] = round(ready, 2)
        fault.extra["outage_s"] = round(fault.end - fault.start, 2)
        return fault

    return inject


async def prometheus_down(env: Env) -> Fault:
    assert env.prom_proxy is not None
    fault = _now_fault()
    env.prom_proxy.down()
    await asyncio.sleep(env.settings.prometheus_outage)
    env.prom_proxy.up()
    fault.end = time.monotonic()
    return fault


async def black_hole(env: Env) -> Fault:
    assert env.api_proxy is not None
    fault = _now_fault()
    env.api_proxy.black_hole()
    await asyncio.sleep(env.settings.black_hole)
    fault.extra["proxy_during"] = env.api_proxy.stats()
    env.api_proxy.restore()
    fault.end = time.monotonic()
    return fault


async def watch_gone(env: Env) -> Fault:
    """Operators cut off (refused); meanwhile bound pods are deleted and nodes replaced, etcd is
    compacted; then the operators reconnect from resourceVersions that no longer exist (410)."""
    assert env.api_proxy is not None
    k = env.k
    before = (await k.get(f"/api/v1/namespaces/{NS}/pods", limit="1"))["metadata"][
        "resourceVersion"
    ]
    fault = _now_fault()
    env.api_proxy.down()
    pods = [p for p in await k.list(f"/api/v1/namespaces/{NS}/pods") if spec(p).get("nodeName")]
    replaced = env.node_names[:2]
    doomed = [p for p in pods if spec(p)["nodeName"] in replaced]
    others = [p for p in pods if spec(p)["nodeName"] not in replaced]
    doomed += env.rng.sample(others, len(others) // 4)
    await asyncio.gather(*(k.delete_pod_now(NS, meta(p)["name"]) for p in doomed))
    for name in replaced:
        await k.delete(f"/api/v1/nodes/{name}")
        env.cluster.exporter.remove(name)
    new_names = [f"{n}-new" for n in replaced]
    for name in new_names:
        await env.cluster.add_node(
            k, name, cpu_usage=0.2, mem_usage=0.3, cpu=str(env.settings.node_cpu),
            memory=f"{env.settings.node_memory_gi}Gi",
        )  # fmt: skip
    env.node_names = [n for n in env.node_names if n not in replaced] + new_names
    revision = await asyncio.to_thread(env.cp.compact_etcd)
    fault.extra.update(deleted_pods=len(doomed), replaced_nodes=replaced, compacted_at=revision)
    fault.extra["raw_watch_410"] = await raw_watch_status(env, before)
    env.api_proxy.up()
    fault.end = time.monotonic()
    return fault


async def raw_watch_status(env: Env, version: str) -> str:
    """What a watch from `version` gets now: 'HTTP 410', 'ERROR 410', or what else."""
    url = f"{env.cp.server}/api/v1/namespaces/{NS}/pods"
    params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "1"}
    k = env.k
    async with k.session.get(url, params=params) as resp:
        if resp.status != 200:
            return f"HTTP {resp.status}"
        line = await resp.content.readline()
    if not line:
        return "no event"
    event = json.loads(line)
    if event.get("type") == "ERROR":
        return f"ERROR {(event.get('object') or {}).get('code')}"
    return f"event {event.get('type')}"


async def restart_all(env: Env) -> Fault:
    fault = _now_fault()
    old = list(env.replicas)
    for replica in old:
        replica.signal(signal.SIGTERM)
    for replica in old:
        await asyncio.to_thread(replica.stop, 20.0)
        env.retire(replica)
    fault.extra["exit_codes"] = [r.returncode for r in old]
    await asyncio.sleep(env.settings.restart_gap)
    fault.extra["pending_at_restart"] = len((await env.truth(events=False)).pending_ours())
    for _ in old:
        await env.add_replica()
    fault.end = time.monotonic()
    return fault


async def crd_late(env: Env) -> Fault:
    # The fault began when the operators started without the CRD.
    started = min(r.started_at for r in env.replicas)
    fault = Fault(started, started, time.time() - (time.monotonic() - started))
    await env.install_policy_crd()
    fault.end = time.monotonic()
    return fault


async def policies_deleted(env: Env) -> Fault:
    fault = _now_fault()
    k = env.k
    names = [meta(p)["name"] for p in await k.list(POLICIES)]
    for name in names:
        with contextlib.suppress(KubeError):
            await k.delete(f"{POLICIES}/{name}")

    async def gone() -> bool:
        return not await k.list(POLICIES)

    try:
        await wait_for(gone, 20, interval=0.2, what="policies deleted")
        fault.extra["finalizers_stripped"] = False
    except TimeoutError:  # nobody removed kopf's finalizer: strip it, and say so
        for policy in await k.list(POLICIES):
            await k.merge_patch(
                f"{POLICIES}/{meta(policy)['name']}", {"metadata": {"finalizers": None}}
            )
        fault.extra["finalizers_stripped"] = True
        await wait_for(gone, 20, interval=0.2, what="policies deleted")
    fault.extra["deleted"] = names
    fault.end = time.monotonic()
    return fault


async def ports_released(env: Env) -> Fault:
    started = min(r.started_at for r in env.replicas)
    fault = Fault(started, started, time.time() - (time.monotonic() - started))
    env.release_ports()
    fault.end = time.monotonic()
    session = aiohttp.ClientSession()
    try:

        async def served() -> bool:
            answers = [await r.get(session, "/metrics") for r in env.replicas]
            return all(a is not None and a[0] == 200 for a in answers)

        try:
            await wait_for(served, 30, interval=0.2, what="metrics served")
            fault.extra["metrics_served_after_s"] = round(time.monotonic() - fault.end, 2)
        except TimeoutError:
            fault.extra["metrics_served_after_s"] = None
    finally:
        await session.close()
    return fault


async def no_fault(env: Env) -> Fault:
    return _now_fault()


async def odd_objects(env: Env) -> Fault:
    s = env.settings
    rng = env.rng
    k = env.k
    fault = _now_fault()
    counts: dict[str, int] = {}

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    for body in oddities.odd_nodes(rng, s.odd_nodes):
        try:
            await k.create("/api/v1/nodes", body)
            count("nodes created")
        except KubeError as exc:
            count(f"nodes refused {exc.status}")
    for body in oddities.odd_policies(rng, s.odd_policies):
        try:
            await k.create(POLICIES, body)
            count("policies created")
        except KubeError as exc:
            count(f"policies refused {exc.status}")
    for body in oddities.invalid_policies(s.invalid_policies):
        try:
            await k.create(POLICIES, body)
            count("invalid policies accepted")
        except KubeError as exc:
            count(f"invalid policies refused {exc.status}")
    pods = oddities.odd_pods(rng, s.odd_pods, NS)
    sem = asyncio.Semaphore(32)

    async def one(body: dict[str, Any]) -> None:
        ours = body["spec"]["schedulerName"] == SCHEDULER
        async with sem:
            ok = await env.create_pod(body, time.monotonic() + 60, count=ours)
        count("pods created" if ok else "pods refused")

    await asyncio.gather(*(one(b) for b in pods))
    fault.extra["odd"] = counts
    fault.end = time.monotonic()
    return fault


def rows(settings: Settings) -> dict[str, Row]:
    s = settings
    lease = s.lease_duration
    return {
        r.name: r
        for r in [
            Row(
                "kill9",
                kill9,
                "leader kill -9",
                takeover=True,
                resume_target=lease + 2,
                expect_degradation=False,
            ),
            Row(
                "sigterm",
                sigterm,
                "leader SIGTERM (graceful hand-over)",
                takeover=True,
                resume_target=2.0,
                expect_degradation=False,
            ),
            Row(
                "apiserver-short",
                _apiserver_down(lambda x: x.outage_short),
                f"kube-apiserver down {s.outage_short:.0f} s",
            ),
            Row(
                "apiserver-long",
                _apiserver_down(lambda x: x.outage_long),
                f"kube-apiserver down {s.outage_long:.0f} s",
            ),
            Row(
                "apiserver-sigterm",
                _apiserver_down(lambda x: x.outage_long, kill=False),
                f"kube-apiserver stopped by SIGTERM, down {s.outage_long:.0f} s",
            ),
            Row("prometheus", prometheus_down, f"Prometheus down {s.prometheus_outage:.0f} s"),
            Row(
                "blackhole", black_hole, f"network black hole {s.black_hole:.0f} s", api_proxy=True
            ),
            Row(
                "watch-410",
                watch_gone,
                "watch expired (410) while pods deleted, nodes replaced",
                api_proxy=True,
                watch_cache=False,
                expect_degradation=False,
            ),
            Row(
                "restart-pending",
                restart_all,
                "operators restarted with pods pending",
                expect_degradation=False,
            ),
            Row(
                "crd-late",
                crd_late,
                "CRD installed after operator start-up",
                crd_before_start=False,
            ),
            Row(
                "policies-deleted",
                policies_deleted,
                "every policy deleted",
                probe_delay=10.0,
                metrics_age_check=True,
            ),
            Row(
                "port-taken",
                ports_released,
                "metrics port taken at start-up",
                ports_taken=True,
                expect_degradation=False,
            ),
            Row(
                "no-election",
                no_fault,
                "two operators without leader election",
                leader_elect=False,
                expect_degradation=False,
                resume_target=None,
                fill=1.3,  # more than fits, all at once: where two unaware schedulers collide
                burst_seconds=0.5,
            ),
            Row(
                "odd-objects",
                odd_objects,
                "1000+ odd pods, nodes, policies mixed in",
                expect_degradation=False,
                resume_target=None,
            ),
        ]
    }


# --- running a row -------------------------------------------------------------------------------
async def run_row(settings: Settings, row: Row) -> dict[str, Any]:
    env = Env(settings, row)
    result: dict[str, Any] = {"fault": row.name, "description": row.description}
    try:
        await env.start()
        await _run(env, row, result)
    except Exception as exc:
        log.exception("row %s failed", row.name)
        result["error"] = repr(exc)
    finally:
        result["logs"] = {r.identity: _tail(r.log_text()) for r in [*env.retired, *env.replicas]}
        await env.stop()
    return result


def _tail(text: str, lines: int = 12) -> list[str]:
    interesting = [
        line
        for line in text.splitlines()
        if any(w in line for w in ("ERROR", "CRITICAL", "Traceback", "WARNING", "Error"))
    ]
    return interesting[-lines:]


async def _run(env: Env, row: Row, result: dict[str, Any]) -> None:
    s = env.settings
    for _ in range(row.replicas):
        await env.add_replica(start=False)
    if row.ports_taken:
        env.take_ports()
    for replica in env.replicas:
        replica.start()
    warm = await env.warm_up(60.0 if row.crd_before_start else 20.0)
    result["warm_up_s"] = None if warm is None else round(warm, 2)
    result["leader_at_start"] = await env.wait_leader(5.0) if row.leader_elect else None
    bodies = env.burst_bodies(row.fill if row.fill is not None else s.fill)
    burst_seconds = row.burst_seconds if row.burst_seconds is not None else s.burst_seconds
    burst = asyncio.create_task(env.paced(bodies, burst_seconds))
    await asyncio.sleep(burst_seconds / 2)
    trickle = asyncio.create_task(env.trickle())  # a pod every 2 s while the fault lasts
    fault = await row.inject(env)
    trickle.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await trickle
    result["fault_s"] = round(fault.end - fault.start, 2)
    probes = asyncio.create_task(
        env.paced(env.probe_bodies(), s.probe_seconds, start_delay=row.probe_delay)
    )
    await burst
    await probes
    settled = await settle(env)
    result["settle_s"] = round(settled, 1)
    await asyncio.sleep(2 * s.metrics_interval + 1)  # a scrape after the last change
    await measure(env, row, fault, result)


async def settle(env: Env) -> float:
    """Until no bind for `settle_quiet` s and no pending pod of ours would fit, or the timeout;
    returns the seconds it took."""
    s = env.settings
    started = time.monotonic()
    while True:
        last = env.timeline.binds[-1].t if env.timeline.binds else started
        now = time.monotonic()
        if now - last >= s.settle_quiet:
            truth = await env.truth(events=False)
            if not truth.lost():
                return now - started
        if now - started > s.settle_timeout:
            return now - started
        await asyncio.sleep(1.0)


async def measure(env: Env, row: Row, fault: Fault, result: dict[str, Any]) -> None:
    s = env.settings
    truth = await env.truth()
    timeline = env.timeline
    ours = {meta(p)["name"]: p for p in truth.pods if truth.ours(p)}
    created = [n for n in env.created if n in ours]
    bound = [n for n in created if spec(ours[n]).get("nodeName")]
    lost = truth.lost()
    twice = truth.bound_twice()
    over = truth.overcommitted()
    holder = await env.lease_holder()
    requested = truth.requested_cpu()
    accounted: dict[str, float | None] = {}
    for replica in env.replicas:
        sample = await env.sampler.scrape(replica) if replica.alive else None
        accounted[replica.identity] = sample.accounted_cpu if sample is not None else None
    leaked = {i: (None if a is None else round(a - requested)) for i, a in accounted.items()}
    if holder in leaked:
        leader_leak = leaked[holder or ""]
    else:  # no leader (no election, or none now): the largest leak of any replica
        known = [v for v in leaked.values() if v is not None]
        leader_leak = max(known, key=abs) if known else None
    crashed = [r.identity for r in [*env.retired, *env.replicas] if r.crashed]
    warnings = truth.warnings(since=fault.wall_start)
    reasons_metric = env.sampler.degraded_reasons(fault.start)
    # resume: first bind after the fault's end (after the fault's start by the new leader for
    # kill/SIGTERM: attributed by the Scheduled event's reportingInstance when it names
    # replicas, else the first bind after the old leader's process exited)
    resume = None
    basis = "first bind after fault end"
    if row.takeover:
        new_leader = fault.extra.get("new_leader")
        by_instance = [
            timeline.bind_time(e.uid)
            for e in timeline.scheduled
            if new_leader and e.instance == new_leader
        ]
        after = [t for t in by_instance if t is not None and t >= fault.start]
        if after:
            resume = min(after) - fault.start
            basis = "first bind whose Scheduled event names the new leader"
        else:
            old_exit = fault.start + (fault.extra.get("old_exit_s") or 0.0)
            first = timeline.first_bind_after(old_exit)
            resume = None if first is None else first.t - fault.start
            basis = "first bind after the old leader exited"
    else:
        first = timeline.first_bind_after(fault.end)
        resume = None if first is None else first.t - fault.end
    if row.takeover:  # load-aware binds by the new leader: from its first bind on
        since = fault.start + (resume or 0.0)
        load_aware = timeline.first_load_aware_after(since)
        metrics_resume = None if load_aware is None else load_aware - fault.start
    else:
        load_aware = timeline.first_load_aware_after(fault.end)
        metrics_resume = None if load_aware is None else load_aware - fault.end
    ages = timeline.metrics_ages_after(fault.end + 10.0) if row.metrics_age_check else []
    result.update(
        created=len(created),
        bound=len(bound),
        lost=len(lost),
        bound_twice=len(twice),
        overcommitted_nodes=len(over),
        leaked_millicpu=leader_leak,
        leaked_by_replica=leaked,
        resume_s=None if resume is None else round(resume, 2),
        resume_basis=basis,
        metrics_resume_s=None if metrics_resume is None else round(metrics_resume, 2),
        crashed=bool(crashed),
        crashed_replicas=crashed,
        degradation_visible=bool(warnings) and bool(reasons_metric),
        warning_reasons=sorted({str(w.get("reason")) for w in warnings}),
        degraded_metric_reasons=sorted(reasons_metric),
        leader_at_end=holder,
        requested_millicpu=requested,
        accounted_millicpu=accounted,
        scheduled_instances=sorted(timeline.instances()),
        by_requests_during_fault=timeline.by_requests_between(fault.start, fault.end),
        lost_examples=lost[:5],
        bound_twice_examples=twice[:5],
        overcommitted_examples=dict(list(over.items())[:5]),
        pending_ours=len(truth.pending_ours()),
        create_errors=env.create_errors,
        fault_extra=fault.extra,
        relists_logged={r.identity: r.log_count(EXPIRED_LOG) for r in env.replicas},
        # Reservations the audit had to release: each one is the invariant broken (and healed).
        stale_reservations={
            r.identity: r.log_count(STALE_LOG) for r in [*env.retired, *env.replicas]
        },
        loops_started={r.identity: r.log_count(STARTED_LOG) for r in [*env.retired, *env.replicas]},
        exit_codes={r.identity: r.returncode for r in env.retired},
        harness_watch_reconnects=sum(w.reconnects for w in env.watchers),
    )
    if ages:
        result["metrics_age_max_s"] = max(ages)
    if any(v for v in leaked.values()):  # does it converge later? (the figure above stands)
        result["leak_converged_s"] = await converge(env)
    if result["lost"]:  # are they bound later?
        result["lost_bound_later_s"] = await lost_later(env)
    result["targets"] = targets(s, row, result)
    result["pass"] = all(v for v in result["targets"].values() if v is not None)


async def converge(env: Env, timeout: float = 60.0) -> float | None:
    """Seconds until every live replica's accounted CPU equals the API's, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        requested = (await env.truth(events=False)).requested_cpu()
        values = [(await env.sampler.scrape(r)).accounted_cpu for r in env.replicas if r.alive]
        if values and all(v is not None and round(v) == requested for v in values):
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(2.0)
    return None


async def lost_later(env: Env, timeout: float = 60.0) -> float | None:
    """Seconds until no pending pod of ours would fit, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if not (await env.truth(events=False)).lost():
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(2.0)
    return None


def targets(s: Settings, row: Row, r: Mapping[str, Any]) -> dict[str, bool | None]:
    """Each target: True (met), False (missed), None (does not apply or not measurable)."""
    leaks = [v for v in (r.get("leaked_by_replica") or {}).values() if v is not None]
    t: dict[str, bool | None] = {
        "0 lost": r.get("lost") == 0,
        "0 bound twice": r.get("bound_twice") == 0,
        "0 over-committed": r.get("overcommitted_nodes") == 0,
        "0 leaked": (all(v == 0 for v in leaks) if leaks else None),
        "0 stale reservations": not any((r.get("stale_reservations") or {}).values()),
        "no crash": not r.get("crashed"),
        "degradation visible": r.get("degradation_visible") if row.expect_degradation else None,
    }
    if row.resume_target is not None:
        resume = r.get("resume_s")
        t[f"resume <= {row.resume_target:g} s"] = resume is not None and resume <= row.resume_target
    # Rows that take metrics away (Prometheus, or every policy / the CRD): load-aware scoring
    # must be back within one refresh (plus the probes' spacing). After API faults the first
    # bind already is load-aware (resume_s covers them).
    if row.name in ("prometheus", "crd-late", "policies-deleted"):
        limit = s.metrics_interval + 1.0 / s.probe_rate
        value = r.get("metrics_resume_s")
        t[f"load-aware <= {limit:g} s"] = value is not None and value <= limit
    if row.metrics_age_check:
        age = r.get("metrics_age_max_s")
        t["metrics refreshed (age <= 5 s)"] = age is not None and age <= 5
    if row.name == "port-taken":
        loops = r.get("loops_started") or {}
        t["one scheduling loop per process"] = all(v <= 1 for v in loops.values())
        t["schedules while the port is taken"] = r.get("warm_up_s") is not None
    return t


# --- the bench -----------------------------------------------------------------------------------
COLUMNS = [
    "fault", "created", "bound", "lost", "bound_twice", "overcommitted_nodes", "leaked_millicpu",
    "resume_s", "metrics_resume_s", "crashed", "degradation_visible",
]  # fmt: skip


def render(results: Sequence[Mapping[str, Any]]) -> str:
    header = [*COLUMNS, "targets"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in results:
        cells = []
        for column in COLUMNS:
            value = r.get(column)
            if column == "fault":
                value = r.get("description") or value
            if column == "degradation_visible" and value is not None:
                reasons = ",".join(r.get("warning_reasons") or []) or "-"
                metric_reasons = ",".join(r.get("degraded_metric_reasons") or []) or "-"
                value = f"{value} (events {reasons}; metric {metric_reasons})"
            cells.append("" if value is None else str(value))
        if "error" in r:
            verdict = f"ERROR {r['error'][:80]}"
        else:
            missed = [k for k, v in (r.get("targets") or {}).items() if v is False]
            verdict = "pass" if not missed else "FAIL: " + ", ".join(missed)
            if r.get("fault") == "no-election":
                verdict += " (expected to fail: no election)"
        cells.append(verdict)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run_bench(
    settings: Settings, names: list[str], on_row: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    table = rows(settings)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown rows {unknown}; known: {', '.join(table)}")
    results = []
    for name in names:
        started = time.monotonic()
        result = await run_row(settings, table[name])
        result["row_seconds"] = round(time.monotonic() - started, 1)
        results.append(result)
        if on_row is not None:
            on_row(result)
    return results


def to_json(settings: Settings, results: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"settings": asdict(settings), **extra, "faults": results}


__all__ = [
    "Env", "Fault", "Row", "Settings", "Watcher", "measure", "render", "replace", "rows",
    "run_bench", "run_row", "to_json",
]  # fmt: skip
