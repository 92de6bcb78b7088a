"""Device pods on the local control plane (dynamic resource allocation, `resource.k8s.io/v1`):
ResourceSlices written by hand as a DRA driver would publish them, a ResourceClaimTemplate whose
claims kube-controller-manager's resourceclaim controller makes, and loadwise allocating the
devices through its allocator helper, writing the claims and binding the pods; the controller
then frees the devices of a deleted pod, and the pod that found none is placed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError

from .conftest import OperatorFactory
from .test_differential import kube_scheduler  # noqa: F401 - the fixture, used by name
from .util import wait_event

RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.example.com"


def device_slice(name: str, node: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "model": {"string": "a100"},
                        "uuid": {"string": f"GPU-{node}-{i}"},
                    },
                    "capacity": {"memory": {"value": "40Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


@contextlib.asynccontextmanager
async def devices(kube: Kube, ns: str, per_node: dict[str, int]) -> AsyncIterator[str]:
    """A DeviceClass and the nodes' slices, removed afterwards (they are cluster-wide)."""
    cls = f"gpu-{ns}"
    selector = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "a100"'
    made = [f"{RESOURCE}/deviceclasses/{cls}"]
    await kube.create(
        f"{RESOURCE}/deviceclasses",
        {"metadata": {"name": cls}, "spec": {"selectors": [{"cel": {"expression": selector}}]}},
    )
    try:
        for node, count in per_node.items():
            name = f"{ns}-{node}"
            await kube.create(f"{RESOURCE}/resourceslices", device_slice(name, node, count))
            made.append(f"{RESOURCE}/resourceslices/{name}")
        yield cls
    finally:
        for path in made:
            with contextlib.suppress(KubeError):
                await kube.delete(path)


def gpu_pod(name: str, ns: str, template: str = "one-gpu") -> dict[str, Any]:
    body = manifests.pod(name, namespace=ns)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return body


async def claim_of(kube: Kube, ns: str, pod: str) -> dict[str, Any] | None:
    raw = await kube.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
    for status in raw.get("status", {}).get("resourceClaimStatuses") or ():
        found: dict[str, Any] = await kube.get(
            f"{RESOURCE}/namespaces/{ns}/resourceclaims/{status['resourceClaimName']}"
        )
        return found
    return None


async def test_device_pods_get_devices_written_into_their_claims_and_freed_on_delete(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    for node in ("gpu-a", "gpu-b", "plain"):
        await local_cluster.add_node(kube, node, cpu="8", memory="16Gi")
    async with devices(kube, ns, {"gpu-a": 1, "gpu-b": 1}) as cls, operator():
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": ns},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": cls,
                                    "selectors": [
                                        {
                                            "cel": {
                                                "expression": f'device.capacity["{DRIVER}"]'
                                                '.memory.compareTo(quantity("32Gi")) >= 0'
                                            }
                                        }
                                    ],
                                },
                            }
                        ]
                    }
                }
            },
        }
        await kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
        for name in ("trainer-0", "trainer-1", "trainer-2"):
            await kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod(name, ns))

        async def bound(name: str) -> str | None:
            raw = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            return raw["spec"].get("nodeName") or None

        names = ("trainer-0", "trainer-1", "trainer-2")

        async def two_bound() -> dict[str, str] | None:
            # which two get the devices depends on the order the controller makes the claims
            found = {n: node for n in names if (node := await bound(n))}
            return found if len(found) == 2 else None

        nodes = await wait_for(two_bound, 30, what="two pods bound")
        assert sorted(nodes.values()) == ["gpu-a", "gpu-b"]
        (waiting,) = set(names) - set(nodes)
        for name, node in nodes.items():
            claim = await claim_of(kube, ns, name)
            assert claim is not None
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert (result["driver"], result["pool"], result["device"]) == (DRIVER, node, "gpu-0")
            pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
        event = await wait_event(kube, ns, waiting, "FailedScheduling", timeout=30)
        assert event["message"] == "0/3 nodes are available: 3 cannot allocate all claims.", event
        assert not await bound(waiting)

        # The controller deletes a deleted pod's claim; its device is free for the third.
        gone = sorted(nodes)[0]
        await kube.delete_pod_now(ns, gone)
        node = await wait_for(lambda: bound(waiting), 60, what=f"{waiting} bound")
        assert node == nodes[gone]
        claim = await claim_of(kube, ns, waiting)
        assert claim is not None and claim["status"]["allocation"]


def plain_template(cls: str, ns: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": cls}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "any-gpu", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


async def test_the_coolest_device_on_the_coolest_node_is_chosen_by_its_measured_load(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-device utilisation and memory in use in DCGM's exporter's format (the dev exporter's
    stand-in: no GPU here), through the real Prometheus: of four devices kube-scheduler's
    allocator would take the first in slice order; loadwise takes the coolest, then the coolest
    left: gpu-b/gpu-0 computes at 70% but its memory is 99% in use, so it is hot (above the
    default 90%) and its node is passed over for gpu-a/gpu-1 (80%)."""
    busy = {("gpu-a", 0): 90.0, ("gpu-a", 1): 80.0, ("gpu-b", 0): 70.0, ("gpu-b", 1): 5.0}
    memory = {("gpu-b", 0): 99.0, ("gpu-b", 1): 3.0}  # a device is as busy as its larger figure
    exporter, prometheus = local_cluster.exporter, local_cluster.prometheus
    assert prometheus is not None
    for node in ("gpu-a", "gpu-b"):
        await local_cluster.add_node(kube, node, cpu="8", memory="16Gi")
    try:
        for (node, index), percent in busy.items():
            in_use = memory.get((node, index))
            exporter.set_device(node, f"GPU-{node}-{index}", index, percent, in_use)

        async def scraped() -> bool:
            util = await asyncio.to_thread(prometheus.query, 'DCGM_FI_DEV_GPU_UTIL{UUID!=""}')
            used = await asyncio.to_thread(prometheus.query, "DCGM_FI_DEV_FB_USED")
            found = (len(util["data"]["result"]), len(used["data"]["result"]))
            return found == (len(busy), len(memory))

        await wait_for(scraped, 30, what="Prometheus to scrape the devices")
        async with devices(kube, ns, {"gpu-a": 2, "gpu-b": 2}) as cls:
            await kube.create(
                f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", plain_template(cls, ns)
            )
            await kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("first", ns, "any-gpu"))
            await wait_for(lambda: claim_of(kube, ns, "first"), 30, what="the claim made")
            monkeypatch.setenv("KUBECONFIG", str(local_cluster.cp.kubeconfig))
            explained = await _explain(f"{ns}/first", local_cluster.operator_config())
            assert f"{ns}/first -> gpu-b" in explained, explained
            assert (
                f"devices on gpu-b: {DRIVER}/gpu-b/gpu-1 (5% busy) (coolest that fit)" in explained
            ), explained
            await run_to_placement(kube, ns, operator)
    finally:
        for node, index in busy:
            exporter.set_device(node, f"GPU-{node}-{index}", index, None)


async def run_to_placement(kube: Kube, ns: str, operator: OperatorFactory) -> None:
    """With the operator running: "first" (made already) and then "second" get the coolest
    devices left, in turn, a hot one passed over."""

    async def allocated(pod: str) -> tuple[str, str] | None:
        claim = await claim_of(kube, ns, pod)
        allocation = (claim or {}).get("status", {}).get("allocation")
        if not allocation:
            return None
        (result,) = allocation["devices"]["results"]
        return result["pool"], result["device"]

    async with operator():
        first = await wait_for(lambda: allocated("first"), 30, what="first's device")
        await kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("second", ns, "any-gpu"))
        second = await wait_for(lambda: allocated("second"), 30, what="second's device")
    assert [first, second] == [("gpu-b", "gpu-1"), ("gpu-a", "gpu-1")]


def extended_pod(name: str, ns: str, resource: str, count: int, scheduler: str) -> dict[str, Any]:
    body = manifests.pod(name, namespace=ns, scheduler_name=scheduler)
    resources = body["spec"]["containers"][0]["resources"]
    resources["requests"][resource] = str(count)
    resources["limits"] = {resource: str(count)}  # extended resources: limits equal requests
    return body


@pytest.mark.usefixtures("kube_scheduler")
async def test_extended_resources_a_device_class_backs_get_the_claim_kube_scheduler_makes(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """KEP-5004, on in 1.37: a pod asking `example.com/...: 2` in a container, and another the
    class's implicit name, get devices through a claim the scheduler creates. loadwise and then
    kube-scheduler place the same two pods on the same nodes: the claims (requests, owner,
    annotation, allocation on the pod's node, reservation) and the pods' statuses match."""
    for node in ("gpu-a", "gpu-b", "plain"):
        await local_cluster.add_node(kube, node, cpu="8", memory="16Gi")
    async with devices(kube, ns, {"gpu-a": 1, "gpu-b": 2}) as cls:
        explicit = f"example.com/{cls}"
        path = f"{RESOURCE}/deviceclasses/{cls}"
        await kube.merge_patch(path, {"spec": {"extendedResourceName": explicit}})
        async with operator():
            ours = await place_extended(
                kube, ns, cls, explicit, local_cluster.operator_config().scheduler_name
            )
        theirs = await place_extended(kube, ns, cls, explicit, "default-scheduler")
        assert ours == theirs, (ours, theirs)


async def place_extended(
    kube: Kube, ns: str, cls: str, explicit: str, scheduler: str
) -> list[tuple[Any, ...]]:
    """Both pods placed by `scheduler`, one after the other; what each got; then gone (the
    garbage collector deletes their claims with them)."""
    implicit = f"deviceclass.resource.kubernetes.io/{cls}"
    found = []
    for name, resource, count in (("two", explicit, 2), ("one", implicit, 1)):
        await kube.create(
            f"/api/v1/namespaces/{ns}/pods", extended_pod(name, ns, resource, count, scheduler)
        )

        async def placed(name: str = name) -> dict[str, Any] | None:
            pod: dict[str, Any] = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            return pod if pod["spec"].get("nodeName") else None

        pod = await wait_for(placed, 30, what=f"{scheduler} placed {name}")
        status = pod["status"].get("extendedResourceClaimStatus") or {}
        claim = await kube.get(
            f"{RESOURCE}/namespaces/{ns}/resourceclaims/{status['resourceClaimName']}"
        )
        meta, allocation = claim["metadata"], claim["status"]["allocation"]
        results = allocation["devices"]["results"]
        assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        (owner,) = meta["ownerReferences"]
        assert owner["uid"] == pod["metadata"]["uid"] and owner["controller"] is True
        found.append(
            (
                name,
                pod["spec"]["nodeName"],
                len(results),
                meta["generateName"],
                meta["annotations"],
                meta["finalizers"],
                claim["spec"],
                status["requestMappings"],
            )
        )
    for name in ("two", "one"):
        await kube.delete_pod_now(ns, name)

    async def claims_gone() -> bool:
        return not await kube.list(f"{RESOURCE}/namespaces/{ns}/resourceclaims")

    await wait_for(claims_gone, 60, what="the garbage collector to delete the claims")
    return found
