"""bench/gang's world: Spark-like pod groups arriving faster than a KWOK fleet drains them, on
nodes whose background load drifts, and the watch that measures what a scheduler made of them.

The fleet: KWOK nodes of 4, 6 or 8 cores (4 GiB per core). Each node's background (its
kwok_usage background pod, requesting nothing: load no scheduler placed) follows a slow sine
of its own, set every DRIFT_STEP seconds: a fifth of the nodes are busy (55-80% CPU, swinging
by 8-20 points, so they cross the hot threshold and come back), the rest at 5-35%.

The groups (`make_scenario`, a function of the seed alone): one driver (500m-1 CPU, 1-2 GiB)
and 4-32 executors (most groups small: 4 + 29 u^2), all of one size per group (250m-1 CPU,
2 GiB per CPU, restartPolicy Never as Spark writes them), each in one of the tenants'
namespaces, joined to a Kubernetes PodGroup
(`scheduling.k8s.io/v1beta1`, gang minCount: the driver plus `min_share` of the executors, all
by default). What a pod uses is what KWOK serves from its annotations once it runs: a driver
15-40% of its request, an executor 25-65% (Spark executors wait on shuffles and I/O), memory
60% of its request. Groups are drawn until their requests add up to the fleet's CPU over
FIT_SHARE (room for about 60% of them at once), and arrive (uniformly at random) within a
window in which they would need `rate` times the fleet: they arrive faster than it drains. A
group runs for its runtime (0.6-1.4 times `runtime`) from the moment its minimum of members
runs, then the harness deletes its pods (KWOK finishes the deletions, as a kubelet would) and
its PodGroup.

The measures come from one watch of every pod, with the time each event arrived (one clock
for creations, bindings and starts):
- placed: the group's minimum of members bound; `to run`: from its last member created to its
  minimum running (KWOK starts a pod 1-6 s after its binding, for both schedulers alike);
- partial: a group from its first member bound until its minimum is, when that takes longer
  than PARTIAL_GRACE (one decision's binds in flight take milliseconds): the room it holds
  while it cannot run. Group-seconds, the most at one instant, and deadlocks: groups partial
  for STUCK seconds or more;
- hot node-seconds: every second, the nodes above HOT CPU by the ground truth (what the
  started pods, backgrounds included, declare: what KWOK serves, without the metrics' lag),
  over the run's fixed duration; beside it the node-seconds the backgrounds alone were hot
  (the same drift for every scheduler), and those hot only with the groups' pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from prometheus_client import REGISTRY

from .. import manifests
from ..cluster import LocalCluster, running_operator, wait_for
from ..kube import Kube, KubeError
from ..kwok_usage import BACKGROUND_NS, declared, usage_annotations

HOT = 0.8  # loadwise's default hot threshold for CPU
FIT_SHARE = 0.6  # the fleet's CPU holds this share of all the groups' requests at once
CORES = (4, 6, 8)
DRIFT_STEP = 5.0  # seconds between background updates
PARTIAL_GRACE = 1.0  # a group partial for less is one decision's binds in flight
STUCK = 30.0  # a group partial this long counts as a deadlock
PREROLL = 120.0  # seconds the backgrounds drift before the groups come (`prelude`)
HISTORY = 8  # pods of each tenant's last job, run during the prelude (`past_jobs`)
LEAVE = 20.0  # seconds before the groups come that the last jobs' pods are deleted
POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
SCHEDULERS = {"loadwise": "loadwise-scheduler", "kube-scheduler": "default-scheduler"}
GROUP_LABEL = "bench.loadwise.io/group"
log = logging.getLogger("bench.gang")


# --- the scenario (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class NodePlan:
    name: str
    cores: int
    base: float  # background CPU 0..1 around which it swings
    swing: float
    period: float  # seconds
    phase: float
    memory: float  # background memory 0..1, steady

    def background(self, t: float) -> float:
        """Background CPU 0..1 at `t` seconds into a run."""
        value = self.base + self.swing * math.sin(2 * math.pi * t / self.period + self.phase)
        return round(min(0.97, max(0.02, value)), 3)


@dataclass(frozen=True)
class MemberPlan:
    suffix: str  # driver, e00, e01, ...
    cpu: int  # millicores requested
    memory: int  # MiB requested
    use_cpu: int  # millicores used once running
    use_memory: int  # MiB


@dataclass(frozen=True)
class GroupPlan:
    name: str
    tenant: str
    arrival: float  # seconds into the run
    runtime: float  # seconds it runs once its minimum runs
    members: tuple[MemberPlan, ...]  # the driver first
    minimum: int

    @property
    def cpu(self) -> int:
        return sum(m.cpu for m in self.members)


@dataclass(frozen=True)
class Scenario:
    seed: int
    nodes: tuple[NodePlan, ...]
    groups: tuple[GroupPlan, ...]
    tenants: tuple[str, ...]
    window: float  # seconds over which the groups arrive

    @property
    def capacity(self) -> int:
        return sum(n.cores for n in self.nodes) * 1000

    @property
    def fit_share(self) -> float:
        """The share of all groups' CPU requests the fleet holds at once."""
        return self.capacity / max(1, sum(g.cpu for g in self.groups))


def tenant_names(count: int) -> tuple[str, ...]:
    return tuple(f"spark-{chr(ord('a') + i)}" for i in range(count))


def make_nodes(rng: random.Random, count: int) -> tuple[NodePlan, ...]:
    nodes = []
    for i in range(count):
        busy = rng.random() < 0.2
        nodes.append(
            NodePlan(
                name=f"gang-{i:03d}",
                cores=rng.choice(CORES),
                base=round(rng.uniform(0.55, 0.8) if busy else rng.uniform(0.05, 0.35), 3),
                swing=round(rng.uniform(0.08, 0.2) if busy else rng.uniform(0.0, 0.1), 3),
                period=round(rng.uniform(60, 150), 1),
                phase=round(rng.uniform(0, 2 * math.pi), 3),
                memory=round(rng.uniform(0.15, 0.4), 3),
            )
        )
    return tuple(nodes)


EXECUTOR_CPU = (250, 500, 750, 1000)  # millicores an executor requests


def executor(rng: random.Random, suffix: str, cpu: int) -> MemberPlan:
    """An executor of `cpu` millicores: 2 GiB per CPU, using 25-65% of its CPU request and 60%
    of its memory."""
    memory = 2 * cpu * 1024 // 1000
    use = max(1, round(cpu * rng.uniform(0.25, 0.65)))
    return MemberPlan(suffix, cpu, memory, use, round(memory * 0.6))


def make_group(
    rng: random.Random, index: int, tenants: Sequence[str], runtime: float, min_share: float
) -> GroupPlan:
    driver_cpu = rng.choice((500, 750, 1000))
    driver_memory = rng.choice((1024, 1536, 2048))
    members = [
        MemberPlan(
            "driver",
            driver_cpu,
            driver_memory,
            max(1, round(driver_cpu * rng.uniform(0.15, 0.4))),
            round(driver_memory * 0.6),
        )
    ]
    executors = 4 + int(29 * rng.random() ** 2)  # 4..32, most groups small
    cpu = rng.choice(EXECUTOR_CPU)
    members.extend(executor(rng, f"e{j:02d}", cpu) for j in range(executors))
    return GroupPlan(
        name=f"g{index:03d}",
        tenant=rng.choice(list(tenants)),
        arrival=0.0,  # drawn once every group is known
        runtime=round(runtime * rng.uniform(0.6, 1.4), 1),
        members=tuple(members),
        minimum=1 + math.ceil(min_share * executors),
    )


def make_scenario(
    seed: int,
    nodes: int,
    groups: int | None = None,
    runtime: float = 25.0,
    tenants: int = 4,
    min_share: float = 1.0,
    rate: float = 2.0,
) -> Scenario:
    """The fleet and the groups, a function of the arguments alone. `groups` None: as many as
    make the fleet hold FIT_SHARE of them; `rate`: how many times faster than the fleet could
    run them the groups arrive."""
    rng = random.Random(seed)
    fleet = make_nodes(rng, nodes)
    capacity = sum(n.cores for n in fleet) * 1000
    names = tenant_names(tenants)
    made: list[GroupPlan] = []

    def more() -> bool:
        if groups is not None:
            return len(made) < groups
        return sum(g.cpu for g in made) < capacity / FIT_SHARE

    while more():
        made.append(make_group(rng, len(made), names, runtime, min_share))
    if groups is None and len(made) > 1:  # the last group drawn may overshoot: the nearer

        def off(share: Sequence[GroupPlan]) -> float:
            return abs(capacity / sum(g.cpu for g in share) - FIT_SHARE)

        if off(made[:-1]) < off(made):
            made.pop()
    # Work (cpu x seconds) over the fleet's, squeezed `rate` times into the arrival window.
    work = sum(g.cpu * g.runtime for g in made)
    window = round(work / capacity / rate, 1)
    arrivals = sorted(rng.uniform(0, window) for _ in made)
    if arrivals:
        arrivals[0] = 0.0
    timed = tuple(
        GroupPlan(g.name, g.tenant, round(a, 2), g.runtime, g.members, g.minimum)
        for g, a in zip(made, arrivals, strict=True)
    )
    return Scenario(seed, fleet, timed, names, window)


def pod_group_name(group: GroupPlan, run: int) -> str:
    """Each run's PodGroups and pods have names of their own: a PodGroup lingers until
    kube-controller-manager lifts its finalizer, and KWOK finishes deletions by name."""
    return f"r{run}-{group.name}"


def spark_pod(
    name: str,
    tenant: str,
    member: MemberPlan,
    scheduler: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    body = manifests.pod(
        name,
        namespace=tenant,
        scheduler_name=scheduler,
        cpu=f"{member.cpu}m",
        memory=f"{member.memory}Mi",
        labels={
            "app": "spark",
            "spark-role": "driver" if member.suffix == "driver" else "executor",
            **(labels or {}),
        },
        annotations=usage_annotations(f"{member.use_cpu}m", f"{member.use_memory}Mi"),
    )
    body["spec"]["restartPolicy"] = "Never"  # as Spark writes its driver and executors
    return body


def member_body(group: GroupPlan, member: MemberPlan, run: int, scheduler: str) -> dict[str, Any]:
    name = pod_group_name(group, run)
    body = spark_pod(
        f"{name}-{member.suffix}", group.tenant, member, scheduler, {GROUP_LABEL: name}
    )
    return manifests.in_group(body, name)


# --- what was seen ------------------------------------------------------------------------
@dataclass
class PodSeen:
    namespace: str
    name: str
    node: str
    running: bool
    deleting: bool
    cpu: int  # millicores it declares (served by KWOK once it runs)
    group: tuple[str, str] | None  # (namespace, PodGroup name)


def pod_seen(pod: Mapping[str, Any]) -> PodSeen:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    joined = spec.get("schedulingGroup") or {}
    group = joined.get("podGroupName") if isinstance(joined, Mapping) else None
    return PodSeen(
        namespace=namespace,
        name=str(meta["name"]),
        node=str(spec.get("nodeName") or ""),
        running=(pod.get("status") or {}).get("phase") == "Running",
        deleting=bool(meta.get("deletionTimestamp")),
        cpu=declared(pod)[0],
        group=(namespace, str(group)) if group else None,
    )


class PodWatch:
    """Every pod of the cluster as last seen, and a listener told of each event with the time
    it arrived. Relists when the API server ends the watch, as an informer does."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.pods: dict[str, PodSeen] = {}  # uid ->
        self.listener: Callable[[PodSeen, float], None] | None = None
        self.errors = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        version = await self._relist()
        self._task = asyncio.create_task(self._run(version))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def apply(self, kind: str, pod: Mapping[str, Any], now: float) -> None:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED":
            self.pods.pop(uid, None)
            return
        seen = self.pods[uid] = pod_seen(pod)
        if self.listener is not None:
            self.listener(seen, now)

    async def _relist(self) -> str:
        page = await self.kube.get("/api/v1/pods")
        now = time.monotonic()
        uids = set()
        for pod in page.get("items") or ():
            self.apply("ADDED", pod, now)
            uids.add(pod["metadata"]["uid"])
        for uid in set(self.pods) - uids:
            del self.pods[uid]
        return str(page["metadata"]["resourceVersion"])

    async def _run(self, version: str) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "3600"}
            try:
                async with self.kube.session.get(
                    f"{self.kube.server}/api/v1/pods", params=params, timeout=timeout
                ) as resp:
                    while line := await resp.content.readline():
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":  # e.g. 410 Gone: relist
                            break
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.apply(event["type"], event["object"], time.monotonic())
                version = await self._relist()
            except (aiohttp.ClientError, KubeError, ValueError):
                self.errors += 1
                await asyncio.sleep(0.5)
                with contextlib.suppress(aiohttp.ClientError, KubeError):
                    version = await self._relist()


@dataclass
class GroupSeen:
    plan: GroupPlan
    name: str  # the PodGroup's
    created: dict[str, float] = field(default_factory=dict)  # member -> first seen
    bound: dict[str, float] = field(default_factory=dict)  # member -> first seen bound
    running: dict[str, float] = field(default_factory=dict)  # member -> first seen running
    finished: float | None = None  # when the harness deleted it, its runtime over
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # its minimum runs

    def see(self, pod: PodSeen, now: float) -> None:
        self.created.setdefault(pod.name, now)
        if pod.node:
            self.bound.setdefault(pod.name, now)
        if pod.running and not pod.deleting:
            self.running.setdefault(pod.name, now)
            if len(self.running) >= self.plan.minimum:
                self.ready.set()

    def times(self) -> GroupTimes:
        size, minimum = len(self.plan.members), self.plan.minimum
        bound, running = sorted(self.bound.values()), sorted(self.running.values())
        return GroupTimes(
            size=size,
            minimum=minimum,
            complete=max(self.created.values()) if len(self.created) == size else None,
            first_bound=bound[0] if bound else None,
            placed=bound[minimum - 1] if len(bound) >= minimum else None,
            running=running[minimum - 1] if len(running) >= minimum else None,
        )


@dataclass(frozen=True)
class GroupTimes:
    size: int
    minimum: int
    complete: float | None  # its last member seen created
    first_bound: float | None
    placed: float | None  # its minimum bound
    running: float | None  # its minimum running


# --- figures (pure) -------------------------------------------------------------------------
def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank: the value at q of the sorted values (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def partial_spans(times: Iterable[GroupTimes], end: float) -> list[tuple[float, float]]:
    """(first bound, minimum bound or `end`) of each group partial for longer than the grace."""
    spans = []
    for t in times:
        if t.first_bound is None:
            continue
        stop = t.placed if t.placed is not None else end
        if stop - t.first_bound > PARTIAL_GRACE:
            spans.append((t.first_bound, stop))
    return spans


def most_at_once(spans: Iterable[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    current = best = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        current += step
        best = max(best, current)
    return best


def summarise(times: Sequence[GroupTimes], start: float, end: float) -> dict[str, Any]:
    """The run's group figures; times are monotonic seconds, the run from `start` to `end`."""
    placed = [t for t in times if t.placed is not None]
    to_bound = [
        t.placed - t.complete for t in placed if t.placed is not None and t.complete is not None
    ]
    to_run = [
        t.running - t.complete for t in placed if t.running is not None and t.complete is not None
    ]
    # Placed per second until the last was placed; over the whole run if some never were.
    last = max((t.placed for t in placed if t.placed is not None), default=start)
    span = last if len(placed) == len(times) else end
    spans = partial_spans(times, end)
    spreads = [
        t.placed - t.first_bound
        for t in placed
        if t.placed is not None and t.first_bound is not None
    ]

    def rounded(value: float | None, digits: int = 2) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "groups": len(times),
        "placed": len(placed),
        "not_placed": len(times) - len(placed),
        "groups_per_s": round(len(placed) / (span - start), 3) if span > start else 0.0,
        "to_run_p50_s": rounded(quantile(to_run, 0.5)),
        "to_run_p90_s": rounded(quantile(to_run, 0.9)),
        "to_bound_p50_s": rounded(quantile(to_bound, 0.5)),
        "to_bound_p90_s": rounded(quantile(to_bound, 0.9)),
        "partial_groups": len(spans),
        "partial_group_s": round(sum(b - a for a, b in spans), 1),
        "partial_max": most_at_once(spans),
        "deadlocks": sum(1 for a, b in spans if b - a >= STUCK),
        "bind_spread_max_s": rounded(max(spreads, default=None), 3),
        # each group's size, seconds to its minimum bound and running (None: never), in order
        "per_group": [
            [
                t.size,
                rounded(t.placed - t.complete, 1) if t.placed and t.complete else None,
                rounded(t.running - t.complete, 1) if t.running and t.complete else None,
            ]
            for t in times
        ],
    }


def node_cpu(
    pods: Iterable[PodSeen], capacity: Mapping[str, int]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per node, CPU 0..1 of its started pods (the ground truth KWOK serves) and of its
    background alone."""
    total = dict.fromkeys(capacity, 0)
    background = dict.fromkeys(capacity, 0)
    for pod in pods:
        if pod.node in total and pod.running and not pod.deleting:
            total[pod.node] += pod.cpu
            if pod.namespace == BACKGROUND_NS:
                background[pod.node] += pod.cpu
    return (
        {n: total[n] / capacity[n] for n in capacity},
        {n: background[n] / capacity[n] for n in capacity},
    )


# --- one run ----------------------------------------------------------------------------------
class Run:
    """One scheduler's run: the groups' lives, the background's drift, the measures."""

    def __init__(
        self,
        cluster: LocalCluster,
        kube: Kube,
        watch: PodWatch,
        scenario: Scenario,
        index: int,
        scheduler: str,
    ) -> None:
        self.cluster, self.kube, self.watch = cluster, kube, watch
        self.scenario, self.index, self.scheduler = scenario, index, scheduler
        self.groups = {
            (g.tenant, pod_group_name(g, index)): GroupSeen(g, pod_group_name(g, index))
            for g in scenario.groups
        }
        self.capacity = {n.name: n.cores * 1000 for n in scenario.nodes}
        self.t0 = 0.0
        self.hot_s = self.background_hot_s = self.pods_hot_s = 0.0
        self.cpu_sum = 0.0
        self.samples = 0
        # per node: hot seconds, hot seconds with the background alone, the sum of CPU samples
        self.per_node = {n: [0.0, 0.0, 0.0] for n in self.capacity}
        self.timeline: list[tuple[float, int, int, int, int]] = []
        self.harness_errors = 0
        self._creating = asyncio.Semaphore(48)

    def see(self, pod: PodSeen, now: float) -> None:
        group = self.groups.get(pod.group) if pod.group else None
        if group is not None:
            group.see(pod, now)

    async def run(self, duration: float) -> dict[str, Any]:
        self.watch.listener = self.see
        self.t0 = time.monotonic()
        tasks = [
            asyncio.create_task(self._drift()),
            asyncio.create_task(self._sample()),
            *(asyncio.create_task(self._life(g)) for g in self.groups.values()),
        ]
        try:
            await asyncio.sleep(duration)
        finally:
            end = time.monotonic()
            self.watch.listener = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        figures = summarise([g.times() for g in self.groups.values()], self.t0, end)
        samples = max(1, self.samples)
        figures.update(
            hot_node_s=round(self.hot_s, 1),
            pods_hot_node_s=round(self.pods_hot_s, 1),
            background_hot_node_s=round(self.background_hot_s, 1),
            cpu_mean=round(self.cpu_sum / samples, 3),
            per_node={
                n: {
                    "hot_s": round(h, 1),
                    "background_hot_s": round(b, 1),
                    "cpu_mean": round(c / samples, 3),
                }
                for n, (h, b, c) in self.per_node.items()
            },
            duration_s=round(end - self.t0, 1),
            harness_errors=self.harness_errors + self.watch.errors,
            timeline=self.timeline,
        )
        return figures

    async def _life(self, group: GroupSeen) -> None:
        plan, ns = group.plan, group.plan.tenant
        await asyncio.sleep(max(0.0, self.t0 + plan.arrival - time.monotonic()))
        scheduler = SCHEDULERS[self.scheduler]
        try:
            await self.kube.create(
                PODGROUPS.format(ns=ns), manifests.pod_group(group.name, ns, plan.minimum)
            )
            bodies = [member_body(plan, m, self.index, scheduler) for m in plan.members]
            await asyncio.gather(*(self._create(ns, b) for b in bodies))
            await group.ready.wait()
            await asyncio.sleep(plan.runtime)
            group.finished = time.monotonic()
            names = [b["metadata"]["name"] for b in bodies]
            await asyncio.gather(*(self._delete(ns, n) for n in names))
            await self.kube.delete(f"{PODGROUPS.format(ns=ns)}/{group.name}")
        except KubeError as exc:
            self.harness_errors += 1
            log.warning("group %s/%s: %s", ns, group.name, exc)

    async def _create(self, ns: str, body: dict[str, Any]) -> None:
        async with self._creating:
            await self.kube.create(f"/api/v1/namespaces/{ns}/pods", body)

    async def _delete(self, ns: str, name: str) -> None:
        with contextlib.suppress(KubeError):  # KWOK finishes it, as a kubelet does
            await self.kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}")

    async def _drift(self) -> None:
        assert self.cluster.usage is not None
        usage = self.cluster.usage
        while True:
            await asyncio.sleep(DRIFT_STEP)
            t = time.monotonic() - self.t0
            results = await asyncio.gather(
                *(
                    usage.set_background(self.kube, n.name, n.background(t), n.memory)
                    for n in self.scenario.nodes
                ),
                return_exceptions=True,
            )
            self.harness_errors += sum(isinstance(r, Exception) for r in results)

    async def _sample(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            cpu, background = node_cpu(self.watch.pods.values(), self.capacity)
            hot = sum(1 for v in cpu.values() if v > HOT)
            background_hot = sum(1 for v in background.values() if v > HOT)
            by_pods = sum(1 for n, v in cpu.items() if v > HOT >= background[n])
            self.hot_s += hot * (now - last)
            self.background_hot_s += background_hot * (now - last)
            self.pods_hot_s += by_pods * (now - last)
            self.cpu_sum += statistics.fmean(cpu.values())
            for node, figures in self.per_node.items():
                figures[0] += (now - last) * (cpu[node] > HOT)
                figures[1] += (now - last) * (background[node] > HOT)
                figures[2] += cpu[node]
            self.samples += 1
            times = [g.times() for g in self.groups.values()]
            running = sum(1 for g in self.groups.values() if g.ready.is_set() and not g.finished)
            waiting = sum(1 for t in times if t.complete is not None and t.placed is None)
            self.timeline.append((round(now - self.t0, 1), hot, background_hot, running, waiting))
            last = now


# --- the bench ------------------------------------------------------------------------------
def loadwise_counts() -> dict[str, float]:
    """loadwise's own counters in this process (it runs here): member placements by basis,
    those where every feasible node was hot, hot nodes passed over, group decisions by result."""
    names = {
        "loadwise_all_nodes_hot_total": "all_hot",
        "loadwise_hot_nodes_passed_over_total": "hot_passed_over",
    }
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name in names:
                key = names[sample.name]
            elif sample.name == "loadwise_placements_total":
                key = f"placements_by_{sample.labels['basis']}"
            elif sample.name == "loadwise_pod_group_decisions_total":
                key = f"group_decisions_{sample.labels['result']}"
            else:
                continue
            counts[key] = counts.get(key, 0.0) + sample.value
    return counts


async def operator_sees(runtime: Any, expected: Mapping[str, float], timeout: float = 60) -> None:
    """Until the operator's own samples show each node's CPU near `expected`: a load-aware
    run must not start on request-based scoring."""

    async def seen() -> bool:
        samples = runtime.scheduler.usage.caches["prometheus"].samples
        return all(
            (s := samples.get(node)) is not None and abs(s.cpu - cpu) <= 0.03
            for node, cpu in expected.items()
        )

    await wait_for(seen, timeout, interval=0.5, what="the operator's samples of node usage")


async def warm_up(kube: Kube, ns: str, scheduler: str, index: int) -> None:
    """One small pod placed and deleted: the scheduler is up and has its caches."""
    name = f"r{index}-warmup"
    body = manifests.pod(name, namespace=ns, scheduler_name=scheduler, cpu="10m")
    await kube.create(f"/api/v1/namespaces/{ns}/pods", body)

    async def bound() -> bool:
        pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return bool(pod["spec"].get("nodeName"))

    await wait_for(bound, 60, interval=0.2, what=f"{scheduler}'s warm-up pod bound")
    with contextlib.suppress(KubeError):
        await kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}")


async def prelude(cluster: LocalCluster, kube: Kube, scenario: Scenario, seconds: float) -> None:
    """The backgrounds' drift for `seconds` before the run (times -seconds to 0, so the run
    goes on from where it ends): a busy node has swung before the groups come, and a scheduler
    that judges nodes by their recent past sees it, as it would on a real cluster (without it
    every node had been flat for minutes, at its value at 0)."""
    steps = int(seconds // DRIFT_STEP)
    for step in range(steps, -1, -1):
        began = time.monotonic()
        await set_backgrounds(cluster, kube, scenario, -step * DRIFT_STEP)
        if step:
            await asyncio.sleep(max(0.0, DRIFT_STEP - (time.monotonic() - began)))


def past_job(
    scenario: Scenario, tenant: str, pods: int, run: int, scheduler: str
) -> list[dict[str, Any]]:
    """A tenant's last job before the run: `pods` executors drawn as the groups' are (their
    own generator, so the groups do not change), without a PodGroup."""
    rng = random.Random(f"{scenario.seed}/{tenant}")
    bodies = []
    for i in range(pods):
        member = executor(rng, f"e{i:02d}", rng.choice(EXECUTOR_CPU))
        bodies.append(spark_pod(f"r{run}-past-{i:02d}", tenant, member, SCHEDULERS[scheduler]))
    return bodies


async def past_jobs(
    kube: Kube, scenario: Scenario, scheduler: str, run: int, seconds: float, pods: int
) -> None:
    """Each tenant's last job (`past_job`), placed at the prelude's start by the scheduler
    under test and deleted LEAVE seconds before the groups come: a tenant has run jobs before,
    as a busy node has swung before, and a scheduler that learns what a namespace's pods use
    of their requests has seen it (without it every tenant is new at time 0, and loadwise
    judges its first groups by placementEstimate). `pods` 0: new tenants."""
    if pods <= 0 or seconds <= LEAVE:
        return
    began = time.monotonic()
    made = [
        (tenant, body)
        for tenant in scenario.tenants
        for body in past_job(scenario, tenant, pods, run, scheduler)
    ]
    await asyncio.gather(*(kube.create(f"/api/v1/namespaces/{ns}/pods", body) for ns, body in made))
    await asyncio.sleep(max(0.0, seconds - LEAVE - (time.monotonic() - began)))
    with contextlib.suppress(KubeError):
        await asyncio.gather(
            *(
                kube.delete(f"/api/v1/namespaces/{ns}/pods/{body['metadata']['name']}")
                for ns, body in made
            )
        )


async def set_backgrounds(cluster: LocalCluster, kube: Kube, scenario: Scenario, t: float) -> None:
    assert cluster.usage is not None
    usage = cluster.usage
    await asyncio.gather(
        *(usage.set_background(kube, n.name, n.background(t), n.memory) for n in scenario.nodes)
    )


async def clear(cluster: LocalCluster, kube: Kube, scenario: Scenario) -> None:
    """Every pod and PodGroup of the tenants gone (KWOK finishes the pods' deletions;
    kube-controller-manager lifts the PodGroups' finalizer once no pod uses them), and the
    backgrounds back to where a run starts, as Prometheus sees them. KWOK is restarted only if
    Prometheus still shows more (it may go on serving a pod it missed the deletion of:
    Kwok.restart), and then waited for until it plays every node again."""
    sem = asyncio.Semaphore(64)

    async def delete(path: str) -> None:
        async with sem:
            with contextlib.suppress(KubeError):
                await kube.delete(path)

    paths = [
        f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
        for ns in scenario.tenants
        for p in await kube.list(f"/api/v1/namespaces/{ns}/pods")
    ]
    await asyncio.gather(*(delete(p) for p in paths))
    groups = [
        f"{PODGROUPS.format(ns=ns)}/{g['metadata']['name']}"
        for ns in scenario.tenants
        for g in await kube.list(PODGROUPS.format(ns=ns))
    ]
    await asyncio.gather(*(delete(p) for p in groups))

    async def gone() -> bool:
        for ns in scenario.tenants:
            if await kube.list(f"/api/v1/namespaces/{ns}/pods"):
                return False
            if await kube.list(PODGROUPS.format(ns=ns)):
                return False
        return True

    await wait_for(gone, 120, interval=0.5, what="the tenants' pods and PodGroups gone")
    await set_backgrounds(cluster, kube, scenario, 0.0)
    start = {n.name: n.background(0.0) for n in scenario.nodes}
    try:
        await cluster.wait_metrics(start, timeout=60)
    except TimeoutError as exc:
        print(f"KWOK restarted: {exc}", flush=True)
        await restart_kwok(cluster, kube, [n.name for n in scenario.nodes])
        await cluster.wait_metrics(start, timeout=120)


async def restart_kwok(cluster: LocalCluster, kube: Kube, nodes: Sequence[str]) -> None:
    """Kwok.restart, then until the new KWOK holds every node's Lease: until then it starts no
    pod there (the old process's Leases, 40 s, must expire first)."""
    assert cluster.kwok is not None
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}"

    async def holders() -> dict[str, str]:
        leases = [await kube.get(path.format(n)) for n in nodes]
        return {
            n: str(lease["spec"].get("holderIdentity"))
            for n, lease in zip(nodes, leases, strict=True)
        }

    before = await holders()
    await asyncio.to_thread(cluster.kwok.restart)

    async def taken() -> bool:
        now = await holders()
        return all(now[n] != before[n] for n in nodes)

    await wait_for(taken, 120, interval=1, what="the new KWOK to hold every node's Lease")


async def one_run(
    cluster: LocalCluster,
    kube: Kube,
    watch: PodWatch,
    scenario: Scenario,
    scheduler: str,
    index: int,
    duration: float,
    policy: dict[str, Any] | None = None,
    preroll: float = PREROLL,
    history: int = HISTORY,
) -> dict[str, Any]:
    """One scheduler's run, then the cleanup. `policy`: loadwise's SchedulingPolicy spec (None:
    none, its built-in defaults); `preroll`: seconds the backgrounds drift before it (`prelude`),
    while each tenant's last job of `history` pods runs (`past_jobs`)."""
    start = {n.name: n.background(0.0) for n in scenario.nodes}
    async with contextlib.AsyncExitStack() as stack:
        if scheduler == "kube-scheduler":
            cluster.cp.start_scheduler(qps=5000, burst=5000)
            stack.callback(cluster.cp.stop_process, "kube-scheduler")
        elif scheduler == "loadwise":
            if policy is not None:  # made before the operator starts: its first list has it
                body = manifests.policy("gang-bench")
                body["spec"] = policy
                await kube.create(POLICIES, body, fieldValidation="Strict")
                stack.push_async_callback(kube.delete, f"{POLICIES}/gang-bench")
            config = cluster.operator_config()
            runtime = await stack.enter_async_context(
                running_operator(config, cluster.cp.kubeconfig)
            )
            await operator_sees(runtime, start)
        else:
            raise ValueError(f"unknown scheduler {scheduler!r}: one of {sorted(SCHEDULERS)}")
        await warm_up(kube, scenario.tenants[0], SCHEDULERS[scheduler], index)
        await asyncio.gather(
            prelude(cluster, kube, scenario, preroll),
            past_jobs(kube, scenario, scheduler, index, preroll, history),
        )
        before = loadwise_counts()
        figures = await Run(cluster, kube, watch, scenario, index, scheduler).run(duration)
        if scheduler == "loadwise":
            after = loadwise_counts()
            figures["loadwise"] = {k: after[k] - before.get(k, 0.0) for k in sorted(after)}
    await clear(cluster, kube, scenario)
    return figures


async def run_all(
    cluster: LocalCluster,
    scenario: Scenario,
    schedulers: Sequence[str],
    duration: float,
    policy: dict[str, Any] | None = None,
    preroll: float = PREROLL,
    history: int = HISTORY,
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    async with cluster.kube() as kube:
        await cluster.install_crd(kube)
        for ns in scenario.tenants:
            with contextlib.suppress(KubeError):
                await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            await cluster.wait_namespace(kube, ns)
        adding = asyncio.Semaphore(8)

        async def add(node: NodePlan) -> None:
            async with adding:
                await cluster.add_node(
                    kube,
                    node.name,
                    cpu_usage=node.background(0.0),
                    mem_usage=node.memory,
                    cpu=str(node.cores),
                    memory=f"{node.cores * 4}Gi",
                )

        await asyncio.gather(*(add(n) for n in scenario.nodes))
        start = {n.name: n.background(0.0) for n in scenario.nodes}
        await cluster.wait_metrics(start, timeout=120)
        watch = PodWatch(kube)
        await watch.start()
        try:
            for index, scheduler in enumerate(schedulers):
                began = time.monotonic()
                results[scheduler] = await one_run(
                    cluster,
                    kube,
                    watch,
                    scenario,
                    scheduler,
                    index,
                    duration,
                    policy,
                    preroll,
                    history,
                )
                print(
                    f"{scheduler}: done in {time.monotonic() - began:.0f} s (run and cleanup)",
                    flush=True,
                )
        finally:
            await watch.stop()
    return results


def as_json(
    scenario: Scenario, results: Mapping[str, Mapping[str, Any]], duration: float, runtime: float
) -> dict[str, Any]:
    groups = scenario.groups
    return {
        "seed": scenario.seed,
        "nodes": len(scenario.nodes),
        "cores": scenario.capacity // 1000,
        "groups": len(groups),
        "pods": sum(len(g.members) for g in groups),
        "fit_share": round(scenario.fit_share, 3),
        "arrival_window_s": scenario.window,
        "duration_s": duration,
        "runtime_s": runtime,
        "tenants": list(scenario.tenants),
        "hot_threshold": HOT,
        "partial_grace_s": PARTIAL_GRACE,
        "stuck_s": STUCK,
        "group_plans": [
            {
                "name": g.name,
                "tenant": g.tenant,
                "arrival": g.arrival,
                "runtime": g.runtime,
                "size": len(g.members),
                "minimum": g.minimum,
                "cpu_m": g.cpu,
            }
            for g in groups
        ],
        "node_plans": [asdict(n) for n in scenario.nodes],
        "schedulers": {name: dict(r) for name, r in results.items()},
    }
