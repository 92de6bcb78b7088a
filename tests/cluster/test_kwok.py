"""KWOK plays the kubelet of simulated nodes (loadwise_dev.kwok): the node turns Ready and
renews its Lease, a pod loadwise places there runs, and a graceful delete completes without a
force delete. KWOK serves the usage of such nodes too (loadwise_dev.kwok_usage). KWOK's general
pod Stages wait a random 1-5 s per step (see loadwise_dev.kwok for what was measured)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.kwok import POD_CIDR, Kwok

from .conftest import OperatorFactory

pytestmark = pytest.mark.cluster


async def test_a_pod_placed_on_a_kwok_node_runs_and_its_graceful_deletion_completes(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, kwok: Kwok
) -> None:
    await local_cluster.add_node(kube, "kw-cool", cpu_usage=0.1, kwok=True)
    await local_cluster.add_node(kube, "kw-busy", cpu_usage=0.7, kwok=True)

    async def ready() -> bool:
        nodes = [await kube.get(f"/api/v1/nodes/{n}") for n in ("kw-cool", "kw-busy")]
        return all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
            for n in nodes
            if n["status"].get("conditions")
        ) and all(n["status"].get("conditions") for n in nodes)

    await wait_for(ready, 30, interval=0.3, what="KWOK to make its nodes Ready")
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/kw-cool"

    async def leased() -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = await kube.get(lease_path)
        except KubeError:
            return None
        return lease if lease["spec"].get("renewTime") else None

    lease = await wait_for(leased, 30, interval=0.3, what="KWOK to hold the node's Lease")
    await local_cluster.wait_metrics({"kw-cool": 0.1, "kw-busy": 0.7})
    async with operator():
        body = manifests.pod("web", namespace=ns)
        body["spec"]["terminationGracePeriodSeconds"] = 3
        await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
        path = f"/api/v1/namespaces/{ns}/pods/web"

        async def running() -> dict[str, Any] | None:
            pod = await kube.get(path)
            return pod if pod["status"].get("phase") == "Running" else None

        pod = await wait_for(running, 45, interval=0.5, what="the pod Running on a KWOK node")
        assert pod["spec"]["nodeName"] == "kw-cool"  # loadwise's choice: the cooler node
        assert str(pod["status"]["podIP"]).startswith(POD_CIDR.split(".")[0] + ".")
        started = time.monotonic()
        await kube.delete(path)  # graceful: KWOK confirms it, as a kubelet would

        async def gone() -> bool:
            try:
                await kube.get(path)
            except KubeError as exc:
                return exc.status == 404
            return False

        await wait_for(gone, 30, interval=0.25, what="the graceful deletion to complete")
        assert time.monotonic() - started < 30
    renewed = await kube.get(lease_path)
    assert renewed["spec"]["renewTime"] >= lease["spec"]["renewTime"]
