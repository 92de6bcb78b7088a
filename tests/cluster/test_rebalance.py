"""e2e: rebalancing's dry run against the real control plane. A ReplicaSet's pod (created by the
real controller-manager, placed by loadwise, run by KWOK) is placed on the cooler node; that
node then turns hot after placement (its background load and the pod's own use rise, as a
Flink TaskManager's does with its data). After `hotRefreshes` refreshes the leader posts a
WouldEvict event naming the node a replacement would take, and evicts nothing;
`loadwise explain node/NAME` says the same."""

from __future__ import annotations

from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube
from loadwise_dev.kwok import Kwok

from .conftest import POLICIES, OperatorFactory
from .util import wait_event

pytestmark = pytest.mark.cluster


def replicaset(ns: str) -> dict[str, Any]:
    labels = {"app": "flink"}
    container = {
        "name": "taskmanager",
        "image": "flink",
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "taskmanager", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": "loadwise-scheduler",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


async def test_a_node_hot_after_placement_gets_a_would_evict_plan_and_nothing_is_evicted(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kwok: Kwok,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await local_cluster.add_node(kube, "kw-a", cpu_usage=0.1, kwok=True)
    await local_cluster.add_node(kube, "kw-b", cpu_usage=0.2, kwok=True)
    await local_cluster.wait_metrics({"kw-a": 0.1, "kw-b": 0.2})
    spec = {
        "podSelector": {"matchLabels": {"app": "flink"}},
        "rebalance": {"enabled": True, "hotRefreshes": 2, "coolRefreshes": 2},
    }
    policy = {"apiVersion": "loadwise.io/v1alpha1", "kind": "SchedulingPolicy"}
    await kube.create(POLICIES, {**policy, "metadata": {"name": "flink"}, "spec": spec})
    async with operator():
        await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", replicaset(ns))

        async def running() -> dict[str, Any] | None:
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
            up = [p for p in pods if p["status"].get("phase") == "Running"]
            return up[0] if up else None

        pod = await wait_for(running, 60, interval=0.5, what="the TaskManager running")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == "kw-a"  # the cooler node when it was placed
        # Then its data grows: the pod uses 1.5 cores and the node's other load rises.
        local_cluster.exporter.set_usage("kw-a", 0.55, 0.1)
        local_cluster.exporter.place_pod(uid, "kw-a", 1500, 256 << 20, namespace=ns, name=name)
        try:
            event = await wait_event(kube, ns, name, "WouldEvict", timeout=60)
            assert event["message"].startswith("would evict from kw-a to relieve it (cpu ")
            assert (
                "over its hot thresholds for 2 refreshes): a replacement would go to kw-b"
                in (event["message"])
            )
            assert event["message"].endswith("policy flink, dry run")
            now = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            assert now["metadata"]["uid"] == uid and not now["metadata"].get("deletionTimestamp")

            monkeypatch.setenv("KUBECONFIG", str(local_cluster.cp.kubeconfig))
            config = local_cluster.operator_config()
            output = await _explain("node/kw-a", config)
            assert "node kw-a, policy flink: cpu 9" in output, output
            assert f"  would move {ns}/{name} -> kw-b" in output, output
            output = await _explain("node/kw-b", config)
            assert "node kw-b, policy flink: cpu 2" in output and "not relieved" in output, output
        finally:
            local_cluster.exporter.remove_pod(uid)
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/taskmanager")
