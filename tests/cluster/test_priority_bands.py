"""Hot thresholds by priority band, through the real API and Prometheus: a production pod
(PriorityClass 1000) is judged by what production pods use on each node, so it goes to the node
busy with batch work and passes over the node its own band has filled; a batch pod is judged by
the whole node and goes the other way. `explain` says the band and what it was judged by, and
the status names a band no placed pod is in.

Usage is KWOK's (loadwise_dev.kwok_usage): each pod uses what its annotations say, read per
pod and per node through the real Prometheus."""

from __future__ import annotations

from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.kwok import Kwok
from loadwise_dev.kwok_usage import usage_annotations

from .conftest import POLICIES, OperatorFactory
from .test_pools import metrics_message
from .util import wait_bound

pytestmark = pytest.mark.cluster
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
PRODUCTION = "lw-band-production"
BANDS = [
    {"name": "production", "minPriority": 1000, "hotThresholds": {"cpu": 60},
     "usage": "BandAndAbove"},
    {"name": "critical", "minPriority": 500000000},
]  # fmt: skip


async def production_class(kube: Kube) -> None:
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRODUCTION},
        "value": 1000,
    }
    try:
        await kube.create(CLASSES, body)
    except KubeError as exc:
        if exc.status != 409:
            raise


def running(ns: str, name: str, node: str, cpu: str, production: bool) -> dict[str, Any]:
    """A pod bound to `node` directly that uses `cpu` (KWOK runs it)."""
    body = manifests.pod(name, namespace=ns, cpu="10m",
                         priority_class=PRODUCTION if production else None)  # fmt: skip
    body["spec"]["nodeName"] = node
    body["metadata"]["annotations"] = usage_annotations(cpu, str(64 << 20))
    return body


async def test_production_pods_are_judged_by_production_use_batch_by_the_whole_node(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, kwok: Kwok
) -> None:
    await production_class(kube)
    # 4 cores each. kw-batchy: 10% background + 2.6 cores of batch + 0.4 of production = 85%,
    # production's share 10%. kw-busy: 10% + 2.6 cores of production = 75%, production's 65%.
    await local_cluster.add_node(kube, "kw-batchy", cpu_usage=0.1, kwok=True)
    await local_cluster.add_node(kube, "kw-busy", cpu_usage=0.1, kwok=True)
    pods = f"/api/v1/namespaces/{ns}/pods"
    await kube.create(pods, running(ns, "batch-a", "kw-batchy", "2600m", production=False))
    await kube.create(pods, running(ns, "prod-a", "kw-batchy", "400m", production=True))
    await kube.create(pods, running(ns, "prod-b", "kw-busy", "2600m", production=True))
    await local_cluster.wait_metrics({"kw-batchy": 0.85, "kw-busy": 0.75}, timeout=60)
    policy = manifests.policy("bands", cpu=1, memory=0, priorityBands=BANDS)
    await kube.create(POLICIES, policy)
    async with operator() as runtime:
        cache = runtime.scheduler.usage.caches["prometheus"]

        async def measured() -> bool:
            return all((ns, n) in cache.pod_usage for n in ("batch-a", "prod-a", "prod-b"))

        await wait_for(measured, 60, what="the operator's per-pod usage of the three pods")
        await kube.create(pods, manifests.pod("new-prod", namespace=ns, cpu="10m",
                                              priority_class=PRODUCTION))  # fmt: skip
        await kube.create(pods, manifests.pod("new-batch", namespace=ns, cpu="10m"))
        placed = await wait_bound(kube, ns, ["new-prod", "new-batch"])
        assert placed == {"new-prod": "kw-batchy", "new-batch": "kw-busy"}, placed
        explained = await _explain(f"{ns}/new-prod", local_cluster.operator_config())
        said = (
            "band production (priority >= 1000): hot at cpu 60%, memory 90% (band production), "
            "judged by what pods of priority >= 1000 use on each node"
        )
        assert said in explained, explained
        assert "kw-busy" in explained and "hot: passed over" in explained, explained

        async def named() -> str | None:
            message = await metrics_message(kube, "bands")
            return message if "priority band critical has no placed pod" in message else None

        await wait_for(named, 30, what="the status naming the empty band")
