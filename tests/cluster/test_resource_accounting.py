"""Resource accounting against the real kube-scheduler on the same API server: pods with
pod-level resources (KEP-2837), which loadwise once placed without counting."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import OperatorFactory
from .util import events, wait_event

pytestmark = pytest.mark.cluster


@pytest.fixture
def kube_scheduler(local_cluster: LocalCluster) -> Iterator[None]:
    local_cluster.cp.start_scheduler()
    try:
        yield
    finally:
        local_cluster.cp.stop_process("kube-scheduler")


def pod_level(name: str, scheduler: str, cpu: str, node: str) -> dict[str, Any]:
    body = manifests.pod(name, scheduler_name=scheduler)
    body["spec"]["containers"][0]["resources"] = {}  # no container requests
    body["spec"]["resources"] = {"requests": {"cpu": cpu}}
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return body


async def test_pod_level_requests_fit_as_kube_scheduler_counts_them(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kube_scheduler: None,
) -> None:
    """Two pods of 1500m at the pod level on a 2-CPU node: one binds, one does not fit."""
    for node in ("theirs", "ours"):
        await local_cluster.add_node(kube, node, cpu="2", memory="8Gi")
    async with operator():
        outcome: dict[str, dict[str, str]] = {}
        for scheduler, node in (("default-scheduler", "theirs"), ("loadwise-scheduler", "ours")):
            for i in range(2):
                body = pod_level(f"{node}-{i}", scheduler, "1500m", node)
                body["metadata"]["namespace"] = ns
                await kube.create(f"/api/v1/namespaces/{ns}/pods", body)

            async def settled(node: str = node) -> dict[str, str] | None:
                pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
                mine = {
                    p["metadata"]["name"]: p for p in pods if p["metadata"]["name"].startswith(node)
                }
                bound = {n: p["spec"].get("nodeName", "") for n, p in mine.items()}
                refused = [n for n, p in mine.items() if manifests.marked_unschedulable(p)]
                return (
                    bound
                    if len(mine) == 2 and sum(map(bool, bound.values())) == 1 and refused
                    else None
                )

            outcome[scheduler] = await wait_for(settled, 30, interval=0.3, what=f"{scheduler} done")
        (pending,) = [n for n, bound in outcome["loadwise-scheduler"].items() if not bound]
        event = await wait_event(kube, ns, pending, "FailedScheduling")
        assert "Insufficient cpu" in event["message"]
    # The same answer from both: one bound, one pending, on identical nodes.
    assert sorted(map(bool, outcome["default-scheduler"].values())) == [False, True]
    assert sorted(map(bool, outcome["loadwise-scheduler"].values())) == [False, True]


async def test_a_placed_pods_resize_counts_as_kube_scheduler_counts_it(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kube_scheduler: None,
) -> None:
    """A placed 500m pod whose resize to 1800m is allocated (status only, as a kubelet writes
    it) leaves no room for a 1-CPU pod on a 2-CPU node, for either scheduler (KEP-1287)."""
    async with operator():
        outcome: dict[str, str | None] = {}
        for scheduler, node in (("default-scheduler", "theirs"), ("loadwise-scheduler", "ours")):
            await local_cluster.add_node(kube, node, cpu="2", memory="8Gi", kwok=False)
            placed = manifests.pod(f"placed-{node}", namespace=ns, cpu="500m")
            placed["spec"]["nodeName"] = node
            await kube.create(f"/api/v1/namespaces/{ns}/pods", placed)
            status = {
                "status": {
                    "containerStatuses": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "imageID": "",
                            "ready": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": "2026-11-25T00:00:00Z"}},
                            "allocatedResources": {"cpu": "1800m", "memory": "128Mi"},
                            "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}},
                        }
                    ]
                }
            }
            await kube.merge_patch(f"/api/v1/namespaces/{ns}/pods/placed-{node}/status", status)
            body = manifests.pod(f"new-{node}", namespace=ns, scheduler_name=scheduler, cpu="1")
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            await kube.create(f"/api/v1/namespaces/{ns}/pods", body)

            async def settled(name: str = f"new-{node}") -> tuple[str | None] | None:
                pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
                if pod["spec"].get("nodeName"):
                    return (pod["spec"]["nodeName"],)
                return (None,) if manifests.marked_unschedulable(pod) else None

            (outcome[scheduler],) = await wait_for(settled, 30, interval=0.3, what="an outcome")
    assert outcome == {"default-scheduler": None, "loadwise-scheduler": None}


async def test_a_nomination_set_by_another_component_is_honoured_as_kube_scheduler_does(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kube_scheduler: None,
) -> None:
    """KEP-5278: a component other than the scheduler (an autoscaler, a queue) sets
    `status.nominatedNodeName`; the pod goes to that node when it fits there, though another
    node would score better (kube-scheduler's evaluateNominatedNode)."""
    async with operator():
        chosen: dict[str, str] = {}
        for scheduler, prefix in (("default-scheduler", "k"), ("loadwise-scheduler", "l")):
            await local_cluster.add_node(kube, f"{prefix}-empty", cpu="8", memory="32Gi")
            await local_cluster.add_node(kube, f"{prefix}-busy", cpu="8", memory="32Gi")
            filler = manifests.pod(f"{prefix}-filler", namespace=ns, cpu="5", memory="20Gi")
            filler["spec"]["nodeName"] = f"{prefix}-busy"
            await kube.create(f"/api/v1/namespaces/{ns}/pods", filler)
            body = manifests.pod(f"{prefix}-nominated", namespace=ns, scheduler_name=scheduler)
            body["spec"]["schedulingGates"] = [{"name": "example.com/queue"}]
            body["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [f"{prefix}-empty", f"{prefix}-busy"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
            path = f"/api/v1/namespaces/{ns}/pods/{prefix}-nominated"
            await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
            await kube.merge_patch(
                f"{path}/status", {"status": {"nominatedNodeName": f"{prefix}-busy"}}
            )
            await kube.merge_patch(path, {"spec": {"schedulingGates": None}})

            async def bound(path: str = path) -> str | None:
                node = (await kube.get(path))["spec"].get("nodeName")
                return str(node) if node else None

            chosen[scheduler] = await wait_for(bound, 30, interval=0.3, what=f"{scheduler} bound")
            # The control: the same pod without a nomination goes to the empty node.
            control = {**body, "metadata": {**body["metadata"], "name": f"{prefix}-control"}}
            control["spec"] = {k: v for k, v in body["spec"].items() if k != "schedulingGates"}
            await kube.create(f"/api/v1/namespaces/{ns}/pods", control)
            chosen[f"{scheduler} control"] = await wait_for(
                functools.partial(bound, f"/api/v1/namespaces/{ns}/pods/{prefix}-control"),
                30,
                interval=0.3,
                what=f"{scheduler} control bound",
            )
    assert chosen == {
        "default-scheduler": "k-busy",
        "default-scheduler control": "k-empty",
        "loadwise-scheduler": "l-busy",
        "loadwise-scheduler control": "l-empty",
    }


async def test_a_pod_naming_a_resource_claim_waits_for_it_then_for_its_device_class(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """DynamicResources' PreEnqueue, through the real informer: a pod naming a ResourceClaim
    that does not exist is held, never tried (no event), and `explain` says why; once the claim
    exists it is queued, and waits for its DeviceClass with kube-scheduler's words (devices
    themselves: test_devices.py)."""
    await local_cluster.add_node(kube, "plain", cpu="4", memory="8Gi")
    body = manifests.pod("trainer", namespace=ns)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-gpu"}]
    async with operator():
        await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
        await asyncio.sleep(3)
        assert not await events(kube, ns, "trainer", "FailedScheduling")
        explained = await _explain(f"{ns}/trainer", local_cluster.operator_config())
        assert (
            "not queued yet, held by DynamicResources: "
            f'could not find ResourceClaim "{ns}/shared-gpu"' in explained
        ), explained
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared-gpu", "namespace": ns},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}
            },
        }
        await kube.create(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", claim)
        event = await wait_event(kube, ns, "trainer", "FailedScheduling")
        assert event["message"] == (
            "0/1 nodes are available: request gpu: device class gpu does not exist."
        ), event
