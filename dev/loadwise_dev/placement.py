"""Placement quality under a burst: loadwise vs the real kube-scheduler vs the naive scorer.

Nodes start with uneven background usage (some already hot). A burst of pods, each declaring a
real usage that differs from its requests, is scheduled by one scheduler at a time on the same
cluster; the simulated usage follows placement through the real Prometheus (so metrics lag
bindings, as in production). Utilisation after the burst is read from the simulation's ground
truth, not from the lagging metrics. Between runs every pod is deleted and usage settles back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import manifests
from .cluster import LocalCluster, running_operator, wait_for
from .kube import Kube, KubeError
from .usage import UsageFeeder, usage_annotations

NS = "placement"
POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
HOT = 0.8
NAIVE_POLICY = {  # the source articles' scorer: score = 100 - cpu%, nothing else
    "weights": {"cpu": 1, "memory": 0},
    "loadShare": 100,
    "placementEstimate": 0,
    "hotThresholds": {"cpu": 100, "memory": 100},
}


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
    per_node: dict[str, dict[str, float]] = field(repr=False, default_factory=dict)


def backgrounds(rng: random.Random, nodes: int) -> dict[str, tuple[float, float]]:
    """About 15% of nodes already hot (82-95% CPU), the rest spread over 5-75%."""
    out = {}
    for i in range(nodes):
        cpu = rng.uniform(0.82, 0.95) if rng.random() < 0.15 else rng.uniform(0.05, 0.75)
        out[f"node-{i:03d}"] = (round(cpu, 3), round(rng.uniform(0.2, 0.75), 3))
    return out


REQUESTS = ("100m", "256Mi")


def pod_usages(rng: random.Random, pods: int) -> list[tuple[str, str]]:
    """Real usage per pod: 20-250m CPU and 64-450Mi memory, against requests of 100m/256Mi
    (bursty pods often use more than they request, idle ones less)."""
    return [(f"{rng.randint(20, 250)}m", f"{rng.randint(64, 450)}Mi") for _ in range(pods)]


def summarise(
    before: dict[str, tuple[float, float]],
    after: dict[str, tuple[float, float]],
    placed: Counter[str],
    pods: int,
    unschedulable: int,
    seconds: float,
) -> Outcome:
    cpu = [after[n][0] for n in before]
    mem = [after[n][1] for n in before]
    return Outcome(
        new_hot_nodes=sum(1 for n in before if before[n][0] <= HOT < after[n][0]),
        hot_nodes=sum(1 for n in before if after[n][0] > HOT),
        cpu_util_max=round(max(cpu), 4),
        cpu_util_stddev=round(statistics.pstdev(cpu), 4),
        mem_util_max=round(max(mem), 4),
        mem_util_stddev=round(statistics.pstdev(mem), 4),
        max_pods_per_node=max(placed.values(), default=0),
        fair_share=round(pods / len(before), 2),
        unschedulable=unschedulable,
        seconds=round(seconds, 2),
        per_node={
            n: {
                "cpu_before": before[n][0],
                "cpu": after[n][0],
                "mem": after[n][1],
                "pods": placed[n],
            }
            for n in before
        },
    )


async def _settled(kube: Kube, pods: int) -> tuple[Counter[str], int] | None:
    placed: Counter[str] = Counter()
    unschedulable = 0
    for pod in await kube.list(f"/api/v1/namespaces/{NS}/pods"):
        node = pod["spec"].get("nodeName")
        if node:
            placed[node] += 1
        elif manifests.marked_unschedulable(pod):
            unschedulable += 1
    return (placed, unschedulable) if sum(placed.values()) + unschedulable == pods else None


async def burst(
    cluster: LocalCluster,
    kube: Kube,
    feeder: UsageFeeder,
    scheduler_name: str,
    usages: Sequence[tuple[str, str]],
) -> tuple[Counter[str], int, float]:
    sem = asyncio.Semaphore(64)

    async def create(i: int, cpu: str, memory: str) -> None:
        body = manifests.pod(
            f"b{i:04d}",
            namespace=NS,
            scheduler_name=scheduler_name,
            cpu=REQUESTS[0],
            memory=REQUESTS[1],
            annotations=usage_annotations(cpu, memory),
        )
        async with sem:
            await kube.create(f"/api/v1/namespaces/{NS}/pods", body)

    started = time.monotonic()
    await asyncio.gather(*(create(i, c, m) for i, (c, m) in enumerate(usages)))
    placed, unschedulable = await wait_for(
        lambda: _settled(kube, len(usages)), 300, interval=0.5, what="burst settled"
    )
    seconds = time.monotonic() - started
    # The feeder has seen every binding once the exporter carries every placed pod.
    bound = sum(placed.values())

    def fed() -> bool:
        feeder.check()
        return cluster.exporter.pod_count() == bound

    await wait_for(
        _async(fed),
        30,
        what=f"usage of {bound} pods fed (have {cluster.exporter.pod_count()})",
    )
    return placed, unschedulable, seconds


def _async(check: Any) -> Any:
    async def probe() -> bool:
        return bool(check())

    return probe


async def clear(cluster: LocalCluster, kube: Kube, before: dict[str, tuple[float, float]]) -> None:
    await kube.delete_all_pods(NS)
    await wait_for(_async(lambda: cluster.exporter.pod_count() == 0), 60, what="pods gone")
    await cluster.wait_metrics({n: cpu for n, (cpu, _) in before.items()})


async def set_policy(kube: Kube, spec: dict[str, Any] | None) -> None:
    """Exactly one policy, `bench`, with this spec (None: the defaults)."""
    for policy in await kube.list(POLICIES):
        name = policy["metadata"]["name"]
        with contextlib.suppress(KubeError):
            await kube.delete(f"{POLICIES}/{name}")
    body = manifests.policy("bench")
    body["spec"] = spec or {}
    await kube.create(POLICIES, body)


async def run(
    cluster: LocalCluster,
    nodes: int,
    pods: int,
    seed: int,
    schedulers: Sequence[str] = ("loadwise", "kube-scheduler", "naive"),
) -> dict[str, Outcome]:
    rng = random.Random(seed)
    before = backgrounds(rng, nodes)
    usages = pod_usages(rng, pods)
    results: dict[str, Outcome] = {}
    async with cluster.kube() as kube:
        await cluster.install_crd(kube)
        with contextlib.suppress(KubeError):
            await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await cluster.wait_namespace(kube, NS)
        for name, (cpu, mem) in before.items():
            await cluster.add_node(kube, name, cpu_usage=cpu, mem_usage=mem, cpu="8", memory="32Gi")
        feeder = UsageFeeder(kube, cluster.exporter)
        await feeder.start()
        try:
            await cluster.wait_metrics({n: cpu for n, (cpu, _) in before.items()})
            for scheduler in schedulers:
                if scheduler == "kube-scheduler":
                    cluster.cp.start_scheduler(qps=5000, burst=5000)
                    try:
                        placed, unschedulable, seconds = await burst(
                            cluster, kube, feeder, "default-scheduler", usages
                        )
                    finally:
                        cluster.cp.stop_process("kube-scheduler")
                else:
                    await set_policy(kube, NAIVE_POLICY if scheduler == "naive" else None)
                    async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
                        placed, unschedulable, seconds = await burst(
                            cluster, kube, feeder, "loadwise-scheduler", usages
                        )
                after = cluster.exporter.utilisation()
                results[scheduler] = summarise(before, after, placed, pods, unschedulable, seconds)
                await clear(cluster, kube, before)
        finally:
            await feeder.stop()
    return results


def as_json(results: dict[str, Outcome], nodes: int, pods: int, seed: int) -> dict[str, Any]:
    return {
        "nodes": nodes,
        "pods": pods,
        "seed": seed,
        "hot_threshold": HOT,
        "schedulers": {name: asdict(outcome) for name, outcome in results.items()},
    }
