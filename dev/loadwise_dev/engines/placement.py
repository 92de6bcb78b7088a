"""Placement quality under a burst: loadwise vs the real kube-scheduler vs the naive scorer.

Nodes start with uneven background usage (some already hot). A burst of pods, each declaring a
real usage that differs from its requests, is scheduled by one scheduler at a time on the same
cluster; the simulated usage follows placement through the real Prometheus (so metrics lag
bindings, as in production). Utilisation after the burst is read from the simulation's ground
truth, not from the lagging metrics. Between runs every burst pod is deleted and usage settles
back.

Each run is also held against the clairvoyant optimum: knowing every pod's real usage in
advance, water-fill the coolest nodes to one common CPU level (`water_fill`); `vs_optimum` is a
scheduler's CPU spread over that optimum's.

Scenarios:
- `burst`: 100m/256Mi pods using 20-250m each; loadwise (under `--policy`), kube-scheduler and
  the naive `100 - cpu%` scorer.
- `workload-mix`: pods belong to workloads (a controller ownerReference to a ConfigMap, kept
  by the garbage collector since it exists), some using a fifth of their requests and some
  three times. A few pods of each run first and stay (history, seen by Prometheus per pod);
  then the burst of the rest goes through loadwise with its learned per-workload estimate, with
  requests only (`learnedEstimate: false`), and kube-scheduler.
- `gpu`: the `burst` nodes and pods (same seed, same figures), plus a GPU utilisation on 30% of
  the nodes, published as DCGM's series through Prometheus (the operator's `gpu` dimension); a
  third of those are GPU-busy (92-99%) whatever their CPU. loadwise runs under `--policy` plus
  `dimensions: [{name: gpu, weight: 1, hotThreshold: 90}]`; kube-scheduler and the naive scorer
  see no GPU, so they fill cool-CPU GPU-busy nodes. `gpu_hot_pods` counts burst pods placed on a
  node above 90% GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .. import manifests
from ..cluster import LocalCluster, running_operator, wait_for
from ..exporter import SIM_DIMENSIONS, SIM_POD_CPU_QUERY
from ..kube import Kube, KubeError
from ..usage import UsageFeeder, usage_annotations

NS = "placement"
POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
HOT = 0.8
IDLE = 0.3  # a node this cool with nothing new on it is a scale-down candidate
NODE_CPU_MILLIS = 8000  # the bench's nodes: 8 cpu, 32 GiB
NAIVE_POLICY = {  # the source articles' scorer: score = 100 - cpu%, nothing else
    "weights": {"cpu": 1, "memory": 0},
    "loadShare": 100,
    "placementEstimate": 0,
    "memoryEstimate": 0,
    "hotThresholds": {"cpu": 100, "memory": 100},
}
# `--policy`: the SchedulingPolicy spec loadwise runs under.
POLICY_SPECS: dict[str, dict[str, Any]] = {
    "default": {},
    "cpu": {"weights": {"cpu": 1, "memory": 0}},
    "pack": {"strategy": "Pack", "targetUtilization": {"cpu": 70, "memory": 80}},
}
SCENARIOS = ("burst", "workload-mix", "gpu")
BURST_SCHEDULERS = ("loadwise", "kube-scheduler", "naive")
MIX_SCHEDULERS = ("loadwise", "loadwise-requests", "kube-scheduler")
PHASE_LABEL = "bench.loadwise.io/phase"  # warmup (history, kept) or burst (measured, deleted)
GPU_SHARE = 0.3  # `gpu`: the share of nodes with a GPU; a third of those GPU-busy
GPU_HOT = 0.9  # `gpu_hot_pods` counts pods on nodes above this GPU utilisation
GPU_DIMENSIONS = [{"name": "gpu", "weight": 1, "hotThreshold": round(GPU_HOT * 100)}]


@dataclass
class Outcome:
    new_hot_nodes: int
    hot_nodes: int
    cpu_util_max: float
    cpu_util_stddev: float
    mem_util_max: float
    mem_util_stddev: float
    max_pods_per_node: int
    fair_share: float
    unschedulable: int
    seconds: float
    nodes_used: int  # nodes that received at least one burst pod
    nodes_empty: int  # nodes that received none
    # Nodes below IDLE CPU that received nothing: what packing keeps free for the autoscaler
    # to remove (spreading fills exactly those first).
    idle_left: int
    vs_optimum: float | None  # cpu_util_stddev / the water-fill optimum's (None: that is 0)
    gpu_hot_pods: int = 0  # burst pods on nodes above GPU_HOT GPU utilisation (`gpu` only)
    per_node: dict[str, dict[str, float]] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class PodPlan:
    name: str
    cpu: str  # real usage, declared to the simulation
    memory: str
    workload: str | None = None  # the ConfigMap that controls it


@dataclass(frozen=True)
class Scenario:
    name: str
    requests: tuple[str, str]
    burst: list[PodPlan]
    warmup: list[PodPlan] = field(default_factory=list)  # placed first, kept: history
    workloads: dict[str, str] = field(default_factory=dict)  # ConfigMap name -> idle/hungry
    gpu: dict[str, float] = field(default_factory=dict)  # GPU nodes -> GPU utilisation 0..1


def backgrounds(rng: random.Random, nodes: int) -> dict[str, tuple[float, float]]:
    """About 15% of nodes already hot (82-95% CPU), the rest spread over 5-75%."""
    out = {}
    for i in range(nodes):
        cpu = rng.uniform(0.82, 0.95) if rng.random() < 0.15 else rng.uniform(0.05, 0.75)
        out[f"node-{i:03d}"] = (round(cpu, 3), round(rng.uniform(0.2, 0.75), 3))
    return out


REQUESTS = ("100m", "256Mi")
MIX_REQUESTS = ("200m", "256Mi")


def pod_usages(rng: random.Random, pods: int) -> list[tuple[str, str]]:
    """Real usage per pod: 20-250m CPU and 64-450Mi memory, against requests of 100m/256Mi
    (bursty pods often use more than they request, idle ones less)."""
    return [(f"{rng.randint(20, 250)}m", f"{rng.randint(64, 450)}Mi") for _ in range(pods)]


def burst_scenario(rng: random.Random, pods: int) -> Scenario:
    usages = pod_usages(rng, pods)
    return Scenario(
        "burst", REQUESTS, [PodPlan(f"b{i:04d}", c, m) for i, (c, m) in enumerate(usages)]
    )


def workload_mix(rng: random.Random, pods: int) -> Scenario:
    """`pods` pods over 4-16 workloads of 200m/256Mi requests; every fourth workload is hungry
    (about 600m, 768Mi: three times its requests), the others idle (about 40m, 51Mi: a fifth).
    A quarter hungry keeps the optimum below the hot threshold on the bench's cluster, so the
    scenario measures estimates, not overload. 3 pods of each are history (2 when small); the
    rest, shuffled, are the burst."""
    count = max(4, min(16, pods // 20))
    kinds = ["hungry" if i % 4 == 3 else "idle" for i in range(count)]
    workloads = {f"w{i:02d}-{kind}": kind for i, kind in enumerate(kinds)}
    names = list(workloads)
    per = [pods // count + (1 if i < pods % count else 0) for i in range(count)]
    history = 3 if min(per) >= 6 else 2

    def plan(name: str, workload: str) -> PodPlan:
        if workloads[workload] == "hungry":
            return PodPlan(
                name, f"{rng.randint(540, 660)}m", f"{rng.randint(700, 830)}Mi", workload
            )
        return PodPlan(name, f"{rng.randint(30, 50)}m", f"{rng.randint(40, 62)}Mi", workload)

    warmup = [plan(f"{w}-h{j}", w) for w in names for j in range(history)]
    rest = [w for w, n in zip(names, per, strict=True) for _ in range(n - history)]
    rng.shuffle(rest)
    burst = [plan(f"b{i:04d}", w) for i, w in enumerate(rest)]
    return Scenario("workload-mix", MIX_REQUESTS, burst, warmup, workloads)


def gpu_utilisations(rng: random.Random, nodes: Sequence[str]) -> dict[str, float]:
    """GPU_SHARE of `nodes` carry a GPU; a third of those are GPU-busy (92-99%), the rest at
    10-60%. Drawn regardless of CPU: a GPU job's host CPU is often cool, which is exactly what a
    CPU-only scorer misreads."""
    gpu_nodes = sorted(rng.sample(list(nodes), round(len(nodes) * GPU_SHARE)))
    busy = set(rng.sample(gpu_nodes, round(len(gpu_nodes) / 3)))
    return {
        n: round(rng.uniform(0.92, 0.99) if n in busy else rng.uniform(0.1, 0.6), 3)
        for n in gpu_nodes
    }


def gpu_hot_pods(placed: Mapping[str, int], gpu: Mapping[str, float]) -> int:
    """Pods placed on a node above GPU_HOT GPU utilisation (a node without a GPU is at 0)."""
    return sum(count for node, count in placed.items() if gpu.get(node, 0.0) > GPU_HOT)


def millis(cpu: str) -> int:
    """`250m` -> 250 (the scenarios write CPU usage in millicores)."""
    return int(cpu.removesuffix("m"))


def water_fill(
    levels: Mapping[str, float], capacity: Mapping[str, float], total: float
) -> tuple[dict[str, float], float]:
    """The clairvoyant optimum: raise the coolest nodes to one common utilisation L so that
    they absorb `total` (in the unit of `capacity`); nodes already above L keep their level,
    and L stops at 1 (a total beyond the free capacity does not fit). Pod granularity is
    ignored, so no placement does better. Returns the levels after, and L."""
    order = sorted(levels, key=levels.__getitem__)
    if not order:
        return {}, 0.0
    used = weight = 0.0
    level = levels[order[0]]
    for k, name in enumerate(order):
        used += levels[name] * capacity[name]
        weight += capacity[name]
        level = (total + used) / weight if weight else levels[name]
        following = levels[order[k + 1]] if k + 1 < len(order) else None
        if following is None or level <= following:
            break
    level = min(1.0, level)
    return {n: max(v, level) for n, v in levels.items()}, level


def optimum_stddev(
    before: Mapping[str, float], burst: Sequence[PodPlan], node_cpu_millis: int
) -> tuple[float, float]:
    """(population stddev of CPU utilisation, common level) of the water-fill optimum."""
    total = sum(millis(p.cpu) for p in burst)
    after, level = water_fill(before, dict.fromkeys(before, float(node_cpu_millis)), total)
    return round(statistics.pstdev(after.values()), 4), round(level, 4)


def summarise(
    before: dict[str, tuple[float, float]],
    after: dict[str, tuple[float, float]],
    placed: Counter[str],
    pods: int,
    unschedulable: int,
    seconds: float,
    optimum: float | None = None,
    gpu: Mapping[str, float] | None = None,
) -> Outcome:
    gpu = gpu or {}
    cpu = [after[n][0] for n in before]
    mem = [after[n][1] for n in before]
    stddev = round(statistics.pstdev(cpu), 4)
    used = sum(1 for n in before if placed[n] > 0)
    return Outcome(
        new_hot_nodes=sum(1 for n in before if before[n][0] <= HOT < after[n][0]),
        hot_nodes=sum(1 for n in before if after[n][0] > HOT),
        cpu_util_max=round(max(cpu), 4),
        cpu_util_stddev=stddev,
        mem_util_max=round(max(mem), 4),
        mem_util_stddev=round(statistics.pstdev(mem), 4),
        max_pods_per_node=max(placed.values(), default=0),
        fair_share=round(pods / len(before), 2),
        unschedulable=unschedulable,
        seconds=round(seconds, 2),
        nodes_used=used,
        nodes_empty=len(before) - used,
        idle_left=sum(1 for n in before if placed[n] == 0 and after[n][0] < IDLE),
        vs_optimum=round(stddev / optimum, 3) if optimum else None,
        gpu_hot_pods=gpu_hot_pods(placed, gpu),
        per_node={
            n: {
                "cpu_before": before[n][0],
                "cpu": after[n][0],
                "mem": after[n][1],
                "pods": placed[n],
                **({"gpu": gpu[n]} if n in gpu else {}),
            }
            for n in before
        },
    )


async def _settled(kube: Kube) -> tuple[Counter[str], int]:
    """Burst pods bound per node, and how many are marked unschedulable."""
    placed: Counter[str] = Counter()
    unschedulable = 0
    for pod in await kube.list(
        f"/api/v1/namespaces/{NS}/pods", labelSelector=f"{PHASE_LABEL}=burst"
    ):
        node = pod["spec"].get("nodeName")
        if node:
            placed[node] += 1
        elif manifests.marked_unschedulable(pod):
            unschedulable += 1
    return placed, unschedulable


def _pod_body(
    plan: PodPlan, phase: str, scheduler_name: str, scenario: Scenario, owners: Mapping[str, str]
) -> dict[str, Any]:
    body = manifests.pod(
        plan.name,
        namespace=NS,
        scheduler_name=scheduler_name,
        cpu=scenario.requests[0],
        memory=scenario.requests[1],
        labels={PHASE_LABEL: phase},
        annotations=usage_annotations(plan.cpu, plan.memory),
    )
    if plan.workload is not None:
        body["metadata"]["labels"]["workload"] = plan.workload
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": plan.workload,
                "uid": owners[plan.workload],
                "controller": True,
            }
        ]
    return body


async def _create_pods(kube: Kube, bodies: Sequence[dict[str, Any]]) -> None:
    sem = asyncio.Semaphore(64)

    async def create(body: dict[str, Any]) -> None:
        async with sem:
            await kube.create(f"/api/v1/namespaces/{NS}/pods", body)

    await asyncio.gather(*(create(b) for b in bodies))


async def _fed(cluster: LocalCluster, kube: Kube, feeder: UsageFeeder | None, count: int) -> None:
    """Until the usage of every binding is published: with KWOK, until Prometheus serves what
    the pods declare (KWOK started them); else until the exporter carries `count` pods."""
    if feeder is None:
        assert cluster.usage is not None
        truth = await cluster.usage.truth(kube, capped=False)  # as KWOK serves it
        await cluster.wait_metrics({n: cpu for n, (cpu, _) in truth.items()})
        return

    def fed() -> bool:
        feeder.check()
        return cluster.exporter.pod_count() == count

    await wait_for(
        _async(fed),
        30,
        what=f"usage of {count} pods fed (have {cluster.exporter.pod_count()})",
    )


async def burst(
    cluster: LocalCluster,
    kube: Kube,
    feeder: UsageFeeder | None,
    scheduler_name: str,
    scenario: Scenario,
    owners: Mapping[str, str],
    run: int = 0,
) -> tuple[Counter[str], int, float]:
    """Each run's pods get names of their own (`r{run}-`): KWOK finishes a deletion by name,
    now and then twice, and would take a later pod of the same name with it."""
    bodies = [
        _pod_body(replace(p, name=f"r{run}-{p.name}"), "burst", scheduler_name, scenario, owners)
        for p in scenario.burst
    ]
    started = time.monotonic()
    await _create_pods(kube, bodies)
    seen = (0, 0)  # bound, unschedulable: for the message if it never settles

    async def settled() -> tuple[Counter[str], int] | None:
        nonlocal seen
        placed, unschedulable = await _settled(kube)
        seen = (sum(placed.values()), unschedulable)
        return (placed, unschedulable) if sum(seen) == len(bodies) else None

    try:
        placed, unschedulable = await wait_for(settled, 300, interval=0.5, what="burst settled")
    except TimeoutError as exc:
        raise TimeoutError(
            f"{exc} ({scheduler_name}): {seen[0]} bound, {seen[1]} unschedulable"
        ) from None
    seconds = time.monotonic() - started
    await _fed(cluster, kube, feeder, sum(placed.values()) + len(scenario.warmup))
    return placed, unschedulable, seconds


def _async(check: Any) -> Any:
    async def probe() -> bool:
        return bool(check())

    return probe


async def clear(
    cluster: LocalCluster, kube: Kube, before: dict[str, tuple[float, float]], kept: int = 0
) -> None:
    """Delete the burst's pods (the `kept` warm-up pods stay) and wait for usage to settle."""
    sem = asyncio.Semaphore(64)

    async def one(name: str) -> None:
        async with sem:
            if cluster.kwok is None:  # no kubelet would finish it
                await kube.delete_pod_now(NS, name)
                return
            with contextlib.suppress(KubeError):  # KWOK finishes it, as a kubelet does
                await kube.delete(f"/api/v1/namespaces/{NS}/pods/{name}")

    async def burst_pods() -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{NS}/pods"
        return await kube.list(path, labelSelector=f"{PHASE_LABEL}=burst")

    async def gone() -> bool:
        return not await burst_pods()

    await asyncio.gather(*(one(p["metadata"]["name"]) for p in await burst_pods()))
    await wait_for(gone, 120, interval=0.5, what="burst pods gone")
    if cluster.usage is None:
        await wait_for(_async(lambda: cluster.exporter.pod_count() == kept), 60, what="pods gone")
    else:
        # KWOK may go on serving pods it missed the deletion of (Kwok.restart says why).
        assert cluster.kwok is not None
        await asyncio.to_thread(cluster.kwok.restart)
    await cluster.wait_metrics({n: cpu for n, (cpu, _) in before.items()}, timeout=120)


async def set_policy(kube: Kube, spec: dict[str, Any] | None) -> None:
    """Exactly one policy, `bench`, with this spec (None: the defaults). Strict field
    validation: a field the installed CRD lacks is refused, not silently pruned."""
    for policy in await kube.list(POLICIES):
        name = policy["metadata"]["name"]
        with contextlib.suppress(KubeError):
            await kube.delete(f"{POLICIES}/{name}")
    body = manifests.policy("bench")
    body["spec"] = spec or {}
    await kube.create(POLICIES, body, fieldValidation="Strict")


async def _workload_owners(kube: Kube, workloads: Mapping[str, str]) -> dict[str, str]:
    """A ConfigMap per workload (created if missing): name -> uid, for the pods' owner refs."""
    path = f"/api/v1/namespaces/{NS}/configmaps"
    owners = {}
    for name, kind in workloads.items():
        try:
            created = await kube.create(
                path, {"metadata": {"name": name, "namespace": NS}, "data": {"usage": kind}}
            )
        except KubeError as exc:
            if exc.status != 409:
                raise
            created = await kube.get(f"{path}/{name}")
        owners[name] = created["metadata"]["uid"]
    return owners


async def _pod_usage_served(cluster: LocalCluster, pods: Sequence[PodPlan]) -> None:
    """Until Prometheus answers SIM_POD_CPU_QUERY for each of `pods` within 15% of its usage."""
    assert cluster.prometheus is not None
    prometheus = cluster.prometheus
    wanted = {p.name: millis(p.cpu) / 1000 for p in pods}

    async def served() -> bool:
        answer = await asyncio.to_thread(prometheus.query, SIM_POD_CPU_QUERY)
        seen = {
            r["metric"].get("pod"): float(r["value"][1])
            for r in answer["data"]["result"]
            if r["metric"].get("namespace") == NS
        }
        return all(abs(seen.get(n, -1.0) - v) <= 0.15 * v for n, v in wanted.items())

    await wait_for(served, 60, interval=0.5, what="Prometheus to serve per-pod usage")


async def _dimension_served(
    cluster: LocalCluster, name: str, expected: Mapping[str, float], nodes: Sequence[str]
) -> None:
    """Until Prometheus answers SIM_DIMENSIONS[name] for each of `nodes` as `expected` (within
    a point; absent for a node not in it): the schedulers start from what loadwise can see."""
    assert cluster.prometheus is not None
    prometheus = cluster.prometheus
    query = SIM_DIMENSIONS[name]

    async def served() -> bool:
        answer = await asyncio.to_thread(prometheus.query, query)
        seen = {r["metric"].get("node"): float(r["value"][1]) for r in answer["data"]["result"]}
        return all(
            abs(seen.get(n, -1.0) - expected[n]) <= 0.01 if n in expected else n not in seen
            for n in nodes
        )

    await wait_for(served, 60, interval=0.5, what=f"Prometheus to serve {name} utilisation")


async def _warm_up(
    cluster: LocalCluster,
    kube: Kube,
    feeder: UsageFeeder | None,
    scenario: Scenario,
    owners: Mapping[str, str],
) -> None:
    """Place the history pods (loadwise, default policy), wait until Prometheus serves their
    usage per pod, and until they were placed two metrics lags ago plus a refresh or two (the
    operator learns only from pods that old): a learned estimate has something to learn from."""
    if not scenario.warmup:
        return
    bodies = [
        _pod_body(p, "warmup", "loadwise-scheduler", scenario, owners) for p in scenario.warmup
    ]
    await set_policy(kube, None)
    async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
        await _create_pods(kube, bodies)

        async def bound() -> bool:
            pods = await kube.list(
                f"/api/v1/namespaces/{NS}/pods", labelSelector=f"{PHASE_LABEL}=warmup"
            )
            return sum(1 for p in pods if p["spec"].get("nodeName")) == len(bodies)

        await wait_for(bound, 120, interval=0.5, what="warm-up pods bound")
        bound_at = time.monotonic()
    await _fed(cluster, kube, feeder, len(bodies))
    await _pod_usage_served(cluster, scenario.warmup)
    config = cluster.operator_config()
    assert config.metrics.lag is not None  # the harness sets it (its queries' 5 s window)
    learnable = bound_at + 2 * config.metrics.lag + 2 * config.metrics.interval
    await asyncio.sleep(max(2.0, learnable - time.monotonic()))


def loadwise_spec(scheduler: str, policy: str, scenario: Scenario) -> dict[str, Any] | None:
    """The SchedulingPolicy spec for a loadwise run (None: not a loadwise run)."""
    if scheduler == "naive":
        return NAIVE_POLICY
    if scheduler not in ("loadwise", "loadwise-requests"):
        return None
    spec = scenario_spec(policy, scenario)
    if scenario.name == "workload-mix":
        spec["learnedEstimate"] = scheduler == "loadwise"
    return spec


def scenario_spec(policy: str, scenario: Scenario | None) -> dict[str, Any]:
    """`--policy`'s spec as the scenario runs it: `gpu` adds the gpu dimension (a copy: the
    table of specs is left as it is)."""
    spec = dict(POLICY_SPECS[policy])
    if scenario is not None and scenario.gpu:
        spec["dimensions"] = [dict(d) for d in GPU_DIMENSIONS]
    return spec


def make_scenario(
    name: str, seed: int, nodes: int, pods: int
) -> tuple[dict[str, tuple[float, float]], Scenario]:
    """The nodes' backgrounds and the pods, a function of the seed alone."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}: one of {SCENARIOS}")
    rng = random.Random(seed)
    before = backgrounds(rng, nodes)
    if name == "workload-mix":
        return before, workload_mix(rng, pods)
    scenario = burst_scenario(rng, pods)
    if name == "gpu":  # drawn after the burst's, so the nodes and pods are the burst's
        scenario = replace(scenario, name="gpu", gpu=gpu_utilisations(rng, list(before)))
    return before, scenario


async def run_scenario(
    cluster: LocalCluster,
    nodes: int,
    pods: int,
    seed: int,
    schedulers: Sequence[str] | None = None,
    policy: str = "default",
    scenario_name: str = "burst",
) -> tuple[Scenario, dict[str, Outcome], dict[str, float]]:
    """Every scheduler's outcome, and the optimum (`cpu_stddev`, `cpu_level`, and `cpu_before`:
    the stddev with nothing placed)."""
    if policy not in POLICY_SPECS:
        raise ValueError(f"unknown policy {policy!r}: one of {sorted(POLICY_SPECS)}")
    backgrounds_, scenario = make_scenario(scenario_name, seed, nodes, pods)
    if schedulers is None:
        schedulers = MIX_SCHEDULERS if scenario.name == "workload-mix" else BURST_SCHEDULERS
    results: dict[str, Outcome] = {}
    async with cluster.kube() as kube:
        await cluster.install_crd(kube)
        with contextlib.suppress(KubeError):
            await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await cluster.wait_namespace(kube, NS)
        for name, (cpu, mem) in backgrounds_.items():
            await cluster.add_node(kube, name, cpu_usage=cpu, mem_usage=mem, cpu="8", memory="32Gi")
        owners = await _workload_owners(kube, scenario.workloads)
        # Usage from KWOK needs no feeder: KWOK reads the pods' annotations itself.
        feeder = UsageFeeder(kube, cluster.exporter) if cluster.usage is None else None
        if feeder is not None:
            await feeder.start()
        try:
            for node, busy in scenario.gpu.items():
                cluster.exporter.set_dimension(node, "gpu", busy)
            await cluster.wait_metrics({n: cpu for n, (cpu, _) in backgrounds_.items()})
            await _warm_up(cluster, kube, feeder, scenario, owners)
            # The state every burst starts from: background plus the history pods.
            before = backgrounds_
            if scenario.warmup:
                now = await cluster.utilisation(kube)
                before = {n: now[n] for n in backgrounds_}
                await cluster.wait_metrics({n: cpu for n, (cpu, _) in before.items()})
            cpu_before = {n: cpu for n, (cpu, _) in before.items()}
            optimum, level = optimum_stddev(cpu_before, scenario.burst, NODE_CPU_MILLIS)
            if scenario.gpu:
                await _dimension_served(cluster, "gpu", scenario.gpu, list(backgrounds_))
            for run, scheduler in enumerate(schedulers):
                spec = loadwise_spec(scheduler, policy, scenario)
                if scheduler == "kube-scheduler":
                    cluster.cp.start_scheduler(qps=5000, burst=5000)
                    try:
                        placed, unschedulable, seconds = await burst(
                            cluster, kube, feeder, "default-scheduler", scenario, owners, run
                        )
                    finally:
                        cluster.cp.stop_process("kube-scheduler")
                elif spec is not None:
                    await set_policy(kube, spec)
                    async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
                        placed, unschedulable, seconds = await burst(
                            cluster, kube, feeder, "loadwise-scheduler", scenario, owners, run
                        )
                else:
                    raise ValueError(f"unknown scheduler {scheduler!r}")
                after = await cluster.utilisation(kube)
                results[scheduler] = summarise(
                    before,
                    after,
                    placed,
                    len(scenario.burst),
                    unschedulable,
                    seconds,
                    optimum,
                    scenario.gpu,
                )
                await clear(cluster, kube, before, kept=len(scenario.warmup))
        finally:
            for node in scenario.gpu:
                cluster.exporter.clear_dimension(node, "gpu")
            if feeder is not None:
                await feeder.stop()
    figures = {
        "cpu_stddev": optimum,
        "cpu_level": level,
        "cpu_before": round(statistics.pstdev(cpu_before.values()), 4),
    }
    return scenario, results, figures


def as_json(
    results: dict[str, Outcome],
    nodes: int,
    pods: int,
    seed: int,
    policy: str = "default",
    scenario: Scenario | None = None,
    optimum: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "nodes": nodes,
        "pods": pods,
        "seed": seed,
        "hot_threshold": HOT,
        "scenario": scenario.name if scenario else "burst",
        "policy": policy,
        "policy_spec": scenario_spec(policy, scenario),
    }
    if optimum is not None:
        data["optimum_cpu_stddev"] = optimum["cpu_stddev"]
        data["optimum_cpu_level"] = optimum["cpu_level"]
        data["cpu_stddev_before"] = optimum["cpu_before"]
    if scenario is not None and scenario.warmup:
        data["requests"] = list(scenario.requests)
        data["workloads"] = scenario.workloads
        data["warmup_pods"] = len(scenario.warmup)
        data["burst_pods"] = len(scenario.burst)
    if scenario is not None and scenario.gpu:
        data["gpu_hot_threshold"] = GPU_HOT
        data["gpu_nodes"] = len(scenario.gpu)
        data["gpu_hot_nodes"] = sum(1 for v in scenario.gpu.values() if v > GPU_HOT)
    data["schedulers"] = {name: asdict(outcome) for name, outcome in results.items()}
    return data
