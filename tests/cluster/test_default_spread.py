"""kube-scheduler's system default topology spreading, against a real API server and
controller-manager: a Deployment's pods (its ReplicaSet is their controller) and pods selected by
a Service are spread over equally loaded nodes, as kube-scheduler spreads them."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError

from .conftest import OperatorFactory
from .util import wait_bound

pytestmark = pytest.mark.cluster


def best_effort(name: str, ns: str, labels: dict[str, str], node: str = "") -> dict[str, Any]:
    raw = manifests.pod(name, namespace=ns, labels=labels)
    del raw["spec"]["containers"][0]["resources"]
    if node:
        raw["spec"]["nodeName"] = node
    return raw


async def equal_nodes(kube: Kube, cluster: LocalCluster, count: int) -> list[str]:
    names = [f"spread-{i}" for i in range(count)]
    for name in names:
        await cluster.add_node(kube, name, cpu_usage=0.1, mem_usage=0.1)
    await cluster.wait_metrics(dict.fromkeys(names, 0.1))
    return names


async def test_a_deployment_of_best_effort_pods_is_spread_over_equal_nodes(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    nodes = await equal_nodes(kube, local_cluster, 5)
    template = best_effort("unused", ns, {"app": "web"})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
        },
    }
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    async with operator():
        await kube.create(path, deployment)
        try:
            # The controller-manager creates the ReplicaSet, then its pods.
            async def all_pods() -> list[str] | None:
                pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
                names = [p["metadata"]["name"] for p in pods]
                return names if len(names) == 10 else None

            names = await wait_for(all_pods, 30, what="the Deployment's 10 pods")
            placed = await wait_bound(kube, ns, names)
            # Read before the Deployment goes: its pods are then garbage-collected.
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
        finally:
            with contextlib.suppress(KubeError):
                await kube.delete(f"{path}/web")
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"ReplicaSet"}
    per_node = Counter(placed.values())
    counts = [per_node[n] for n in nodes]
    assert max(counts) - min(counts) <= 1, counts  # kube-scheduler: 2 on each


async def test_pods_a_service_selects_count_and_others_do_not(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    nodes = await equal_nodes(kube, local_cluster, 6)
    await kube.create(
        f"/api/v1/namespaces/{ns}/services",
        {
            "metadata": {"name": "api", "namespace": ns},
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]},
        },
    )
    # One pod on every node: the Service selects those on the first four only.
    for i, node in enumerate(nodes):
        app = "api" if i < 4 else "other"
        await kube.create(
            f"/api/v1/namespaces/{ns}/pods", best_effort(f"placed-{i}", ns, {"app": app}, node)
        )
    async with operator():
        for name in ("new-0", "new-1"):  # one at a time: each sees the other placed
            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", best_effort(name, ns, {"app": "api"})
            )
            await wait_bound(kube, ns, [name])
    pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
    selected = Counter(
        p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"]["app"] == "api"
    )
    assert [selected[n] for n in nodes] == [1] * 6  # the new ones went where none was selected
