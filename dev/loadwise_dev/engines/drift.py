"""bench/rebalance's world: workloads whose real use drifts after placement (a Flink
TaskManager's grows with its data), set per running pod, and the observer that measures what
the nodes went through.

Pods are real: ReplicaSets (the real controller recreates an evicted pod), run by KWOK (a
graceful deletion completes), placed by the scheduler under test. Their use is the harness's:
every workload's pods use `base` millicores until the drift, then ramp to `peak` (drifting
workloads) or stay (the others); a replacement uses what its workload uses then. Where that use
shows: in the pod's KWOK usage annotations, which KWOK serves as cAdvisor series (KwokPodUsage,
the default), or in the harness's exporter (ExporterPodUsage).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..exporter import UsageExporter
from ..kube import Kube, KubeError
from ..kwok_usage import KwokUsage, usage_annotations

HOT_CPU = 0.8  # the policy's default hot threshold (percent CPU / 100)
HOT_MEMORY = 0.9
MEMORY = 256 << 20  # what each pod holds: memory is not what drifts here
NODE_CPU = 4000
NODE_MEMORY = 16 << 30


@dataclass(frozen=True)
class Workload:
    name: str
    replicas: int
    request: int  # millicores requested
    base: int  # millicores used before the drift
    peak: int  # ... and after it (equal to base: it does not drift)
    budget: bool  # a PodDisruptionBudget (maxUnavailable 1) protects it
    priority: int  # a PriorityClass's value (0: none)


@dataclass(frozen=True)
class Scenario:
    seed: int
    backgrounds: tuple[float, ...]  # per node: CPU use that is no workload's
    workloads: tuple[Workload, ...]
    ramp: float  # seconds from the drift's start to its peak
    # per workload, per replica: the node index its pod starts on (every run starts alike)
    placement: tuple[tuple[int, ...], ...] = ()


def scenario(seed: int, nodes: int = 10, workloads: int = 8, ramp: float = 2.0) -> Scenario:
    """About 60% of the cluster's CPU in use after the drift (three workloads in eight grow),
    so nodes where their pods met turn hot while others have room: what rebalancing is for.
    The drift is a step (a burst of data reaching a TaskManager), over `ramp` seconds."""
    rng = random.Random(seed)
    backgrounds = tuple(round(rng.uniform(0.05, 0.3), 2) for _ in range(nodes))
    drifting = set(rng.sample(range(workloads), max(1, workloads * 3 // 8)))
    steady = sorted(set(range(workloads)) - drifting)
    # A budget on one drifting and one steady workload; the higher priority on a drifting one
    # (its pods are moved last).
    budgeted = {rng.choice(sorted(drifting)), rng.choice(steady or sorted(drifting))}
    high = rng.choice(sorted(drifting))
    made = []
    for i in range(workloads):
        base = rng.randrange(150, 300, 10)
        made.append(
            Workload(
                name=f"job-{i}",
                replicas=rng.randint(3, 4),
                request=rng.randrange(400, 800, 50),
                base=base,
                peak=rng.randrange(1100, 1500, 50) if i in drifting else base,
                budget=i in budgeted,
                priority=1000 if i == high else 0,
            )
        )
    # Where the pods start: any node with room for their requests, at random (seeded). Every
    # node is cool then; where drifting pods happen to meet, it turns hot after the drift.
    free = [NODE_CPU] * nodes
    placement = []
    for workload in made:
        spots = []
        for _ in range(workload.replicas):
            fits = [n for n in range(nodes) if free[n] >= workload.request]
            node = rng.choice(fits)
            free[node] -= workload.request
            spots.append(node)
        placement.append(tuple(spots))
    return Scenario(seed, backgrounds, tuple(made), ramp, tuple(placement))


def use(workload: Workload, since_drift: float | None, ramp: float) -> int:
    """Millicores each pod of the workload uses, `since_drift` seconds after the drift began
    (None: before it)."""
    if since_drift is None or since_drift <= 0:
        return workload.base
    share = min(1.0, since_drift / ramp)
    return int(workload.base + share * (workload.peak - workload.base))


def throttled(wanted: int, total: int, room: int) -> int:
    """Millicores a pod that wants `wanted` gets on a node whose pods want `total` together with
    `room` left by its background: all of it while they fit, else a share in proportion to what
    it wants (a saturated node runs at 100%, as a real one throttles; the kernel divides by CPU
    weights, which follow requests: dividing by demand is this simulation's simplification)."""
    if total <= room:
        return wanted
    return max(1, wanted * max(room, 0) // total)


def replicaset(ns: str, workload: Workload, scheduler: str, label: str = "rb") -> dict[str, Any]:
    labels = {"app": label, "job": workload.name}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": "taskmanager",
                "resources": {
                    "requests": {"cpu": f"{workload.request}m", "memory": "256Mi"},
                    "limits": {"memory": "512Mi"},
                },
            }
        ],
    }
    if workload.priority:
        spec["priorityClassName"] = "rb-high"
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": workload.name, "namespace": ns},
        "spec": {
            "replicas": workload.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                # A new pod uses the base from its start (KWOK reads these; the drift patches
                # them); the exporter ignores them.
                "metadata": {"labels": labels, "annotations": kwok_annotations(workload.base)},
                "spec": spec,
            },
        },
    }


def kwok_annotations(millicores: int) -> dict[str, str]:
    return usage_annotations(f"{millicores}m", str(MEMORY))


class PodUsage(Protocol):
    """Where a running pod's use shows, and the ground truth per node (CPU, memory 0..1)."""

    async def place(self, pod: dict[str, Any], node: str, millicores: int) -> None: ...

    def keep_only(self, uids: set[str]) -> None: ...

    async def truth(self) -> dict[str, tuple[float, float]]: ...


class KwokPodUsage:
    """The pod's KWOK usage annotations, patched when its use changes: KWOK serves them as the
    kubelet's cAdvisor series. Truth: what started pods declare (kwok_usage.KwokUsage)."""

    def __init__(self, kube: Kube, usage: KwokUsage) -> None:
        self.kube = kube
        self.usage = usage

    async def place(self, pod: dict[str, Any], node: str, millicores: int) -> None:
        wanted = kwok_annotations(millicores)
        annotations = pod["metadata"].get("annotations") or {}
        if any(annotations.get(key) != value for key, value in wanted.items()):
            await self.usage.set_pod(self.kube, pod, millicores, MEMORY)

    def keep_only(self, uids: set[str]) -> None:
        """Nothing to forget: KWOK stops serving a pod when it is gone."""

    async def truth(self) -> dict[str, tuple[float, float]]:
        return await self.usage.truth(self.kube, started_only=True)


class ExporterPodUsage:
    """The harness's exporter's per-pod series; its ground truth."""

    def __init__(self, exporter: UsageExporter) -> None:
        self.exporter = exporter
        self._placed: set[str] = set()  # uids: the exporter may carry others' pods

    async def place(self, pod: dict[str, Any], node: str, millicores: int) -> None:
        meta = pod["metadata"]
        self._placed.add(meta["uid"])
        self.exporter.place_pod(
            meta["uid"], node, millicores, MEMORY, namespace=meta["namespace"], name=meta["name"]
        )

    def keep_only(self, uids: set[str]) -> None:
        for uid in self._placed - uids:
            self.exporter.remove_pod(uid)
        self._placed &= uids

    async def truth(self) -> dict[str, tuple[float, float]]:
        return self.exporter.utilisation()


def budget(ns: str, workload: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": workload.name, "namespace": ns},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"job": workload.name}}},
    }


@dataclass
class PodSeen:
    uid: str
    name: str
    workload: str
    owner: str  # the ReplicaSet's UID
    created: float
    node: str = ""


@dataclass
class World:
    """What happened in one run, as the harness saw it."""

    pods: dict[str, PodSeen] = field(default_factory=dict)  # uid -> pod
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # node -> (t, cpu)
    hot_node_seconds: float = 0.0
    pdb_violations: int = 0
    # The harness's own failures (a list, a patch, a truth not read): a run with many is suspect
    # (its pods may not have drifted, or its hot seconds gone uncounted), so the row shows them.
    harness_errors: int = 0
    _violating: set[str] = field(default_factory=set)


class Driver:
    """Sets each running pod's use (every half second; throttled where a node's pods want more
    than it has) and measures the nodes (every second): hot node-seconds by the ground truth,
    PodDisruptionBudgets violated."""

    def __init__(
        self,
        kube: Kube,
        usage: PodUsage,
        ns: str,
        nodes: list[str],
        plan: Scenario,
    ) -> None:
        self.kube = kube
        self.usage = usage
        self.ns = ns
        self.nodes = nodes
        self.plan = plan
        self.by_name = {w.name: w for w in plan.workloads}
        # Per node, the millicores its background leaves to the workloads' pods.
        self.room = {
            node: NODE_CPU - round(background * NODE_CPU)
            for node, background in zip(nodes, plan.backgrounds, strict=True)
        }
        self.world = World()
        self.drift_at: float | None = None
        self.measuring = False
        self._last_truth: dict[str, tuple[float, float]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._feed()), asyncio.create_task(self._measure())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.usage.keep_only(set())

    async def _feed(self) -> None:
        while True:
            try:
                await self.feed_once(time.time())
            except Exception:  # a failed list: the next one
                self.world.harness_errors += 1
            await asyncio.sleep(0.5)

    async def feed_once(self, now: float) -> None:
        pods = await self.kube.list(f"/api/v1/namespaces/{self.ns}/pods")
        since = None if self.drift_at is None else now - self.drift_at
        present = set()
        wanted: list[tuple[dict[str, Any], str, int]] = []  # (pod, node, millicores it wants)
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            uid, job = meta["uid"], meta.get("labels", {}).get("job", "")
            owners: list[dict[str, Any]] = meta.get("ownerReferences") or [{}]
            owner = str(owners[0].get("uid", ""))
            seen = self.world.pods.setdefault(uid, PodSeen(uid, meta["name"], job, owner, now))
            seen.node = spec.get("nodeName") or seen.node
            workload = self.by_name.get(job)
            if workload is None or pod["status"].get("phase") != "Running" or not seen.node:
                continue
            present.add(uid)
            wanted.append((pod, seen.node, use(workload, since, self.plan.ramp)))
        demand: defaultdict[str, int] = defaultdict(int)
        for _, node, millicores in wanted:
            demand[node] += millicores
        for pod, node, millicores in wanted:
            served = throttled(millicores, demand[node], self.room.get(node, NODE_CPU))
            try:
                await self.usage.place(pod, node, served)
            except KubeError as exc:
                # Gone meanwhile (404, or 409: its UID is another pod's now): the next list
                # says so. Anything else is the harness failing.
                self.world.harness_errors += exc.status not in (404, 409)
        self.usage.keep_only(present)

    async def _measure(self) -> None:
        last = time.time()
        while True:
            await asyncio.sleep(1.0)
            now = time.time()
            try:
                truth = await self.usage.truth()
            except Exception:  # a failed list: count this second as the last
                self.world.harness_errors += 1
                truth = self._last_truth
            self._last_truth = truth
            hot = 0
            for node in self.nodes:
                cpu, memory = truth.get(node, (0.0, 0.0))
                self.world.series.setdefault(node, []).append((now, cpu))
                hot += cpu > HOT_CPU or memory > HOT_MEMORY
            if self.measuring:
                self.world.hot_node_seconds += hot * (now - last)
                try:
                    await self._budgets()
                except Exception:
                    self.world.harness_errors += 1
            last = now

    async def _budgets(self) -> None:
        """A budget counts as violated once each time its healthy pods fall below what it
        wants (desiredHealthy), as the disruption controller reports it."""
        items = await self.kube.list(f"/apis/policy/v1/namespaces/{self.ns}/poddisruptionbudgets")
        for item in items:
            status = item.get("status") or {}
            name = item["metadata"]["name"]
            under = status.get("currentHealthy", 0) < status.get("desiredHealthy", 0)
            if under and name not in self.world._violating:
                self.world.pdb_violations += 1
            if under:
                self.world._violating.add(name)
            else:
                self.world._violating.discard(name)


@dataclass(frozen=True)
class Eviction:
    uid: str  # the evicted pod's
    owner: str
    workload: str
    source: str
    at: float


def outcome(world: World, evictions: list[Eviction], lost: int, cool_down: float) -> dict[str, Any]:
    """The run's row: hot node-seconds, evictions, replacements back on a source, budgets
    violated, workloads short, the most disruptions of one workload.

    Back to source: an eviction's replacement (the next pod its ReplicaSet created) placed on
    a node a pod of that workload was evicted from within `cool_down` before it; a pod bouncing
    between two nodes counts from its second move on."""
    back = 0
    moves = []
    by_owner: defaultdict[str, list[Eviction]] = defaultdict(list)
    for eviction in evictions:
        by_owner[eviction.owner].append(eviction)
    for eviction in evictions:
        later = sorted(
            (
                p
                for p in world.pods.values()
                if p.owner == eviction.owner
                and p.created >= eviction.at - 1
                and p.uid != eviction.uid
            ),
            key=lambda p: p.created,
        )
        replacement = next((p for p in later if p.node), None)
        moves.append(
            {
                "workload": eviction.workload,
                "from": eviction.source,
                "to": replacement.node if replacement is not None else None,
            }
        )
        if replacement is None:
            continue
        left = {
            e.source
            for e in by_owner[eviction.owner]
            if replacement.created - cool_down <= e.at <= replacement.created + 1
        }
        back += replacement.node in left
    per_workload: defaultdict[str, int] = defaultdict(int)
    for eviction in evictions:
        per_workload[eviction.workload] += 1
    return {
        "hot_node_seconds": round(world.hot_node_seconds, 1),
        "evictions": len(evictions),
        "evictions_back_to_source": back,
        "pdb_violations": world.pdb_violations,
        "lost": lost,
        "max_disruptions_per_workload": max(per_workload.values(), default=0),
        "harness_errors": world.harness_errors,
        "moves": moves,
    }
