"""Hot thresholds by pool and by node, through the real API: a node labelled into a pool is
hot at the pool's threshold, a node's own annotation overrides it, and a pool selecting nothing
or an annotation that cannot be read is said in the policy's status, while placement goes on."""

from __future__ import annotations

from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import POLICIES, OperatorFactory
from .util import wait_bound

pytestmark = pytest.mark.cluster
ANNOTATION = "loadwise.io/hot-thresholds"


async def metrics_message(kube: Kube, name: str) -> str:
    status = (await kube.get(f"{POLICIES}/{name}")).get("status") or {}
    found = [c for c in status.get("conditions") or () if c["type"] == "MetricsAvailable"]
    return str(found[0]["message"]) if found else ""


async def test_a_pools_threshold_and_a_nodes_own_decide_where_pods_go(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    usage = {"spot-1": 0.6, "steady": 0.7}
    await local_cluster.add_node(kube, "spot-1", cpu_usage=0.6, cpu="4", labels={"pool": "spot"})
    await local_cluster.add_node(kube, "steady", cpu_usage=0.7, cpu="4")
    await local_cluster.wait_metrics(usage)
    pools = [
        {"name": "spot", "nodeSelector": {"matchLabels": {"pool": "spot"}},
         "hotThresholds": {"cpu": 50}},
        {"name": "gpu", "nodeSelector": {"matchLabels": {"gpu": "a100"}},
         "hotThresholds": {"cpu": 90}},
    ]  # fmt: skip
    await kube.create(POLICIES, manifests.policy("pools", cpu=1, memory=0, pools=pools))
    async with operator():
        pods = f"/api/v1/namespaces/{ns}/pods"
        await kube.create(pods, manifests.pod("first", namespace=ns, cpu="10m"))
        # spot-1 at 60% is hot by its pool (50%): the 70% node, cool by the policy's 80%
        assert await wait_bound(kube, ns, ["first"]) == {"first": "steady"}
        explained = await _explain(f"{ns}/first", local_cluster.operator_config())
        assert "hot: passed over: cpu 50%, memory 90% (pool spot)" in explained, explained
        await kube.merge_patch(
            "/api/v1/nodes/spot-1", {"metadata": {"annotations": {ANNOTATION: "cpu=75"}}}
        )
        await kube.merge_patch(
            "/api/v1/nodes/steady", {"metadata": {"annotations": {ANNOTATION: "cpu=lots"}}}
        )

        async def said() -> str | None:
            message = await metrics_message(kube, "pools")
            return message if "node steady:" in message else None

        message = await wait_for(said, 30, what="the status naming the refused annotation")
        assert "pool gpu selects no node" in message, message
        assert 'node steady: loadwise.io/hot-thresholds "cpu=lots"' in message, message

        async def noted() -> Any:
            node = await kube.get("/api/v1/nodes/spot-1")
            return ANNOTATION in (node["metadata"].get("annotations") or {})

        await wait_for(noted, 10, what="the annotation")
        await kube.create(pods, manifests.pod("second", namespace=ns, cpu="10m"))
        # spot-1's own 75% makes it cool at 60%, and cooler than steady (whose bad annotation
        # is ignored: 70% under the policy's 80%)
        assert await wait_bound(kube, ns, ["second"]) == {"second": "spot-1"}
