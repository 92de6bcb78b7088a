"""Extended resources backed by a DeviceClass (KEP-5004) through the Scheduler, with the real
device allocator: the claim kube-scheduler would create (its requests, names and mappings),
created, allocated and reserved in PreBind, named in the pod's status; a node whose device plugin
lists the resource needs none; a claim left from an earlier attempt is deleted; a claim made for
a pod that did not bind is deleted."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any

from loadwise.framework.extended_resources import parse_container_requests, requests_and_mappings
from loadwise.scheduler.scheduler import Scheduler
from loadwise_dev import manifests

from ...fakes import Reply, until
from .test_device_allocation import ClaimsApi, allocator, device_class, node_slice
from .test_scheduler import raw_pod, running, scheduler

__all__ = ["allocator"]  # the fixture, used by name

GPU = "example.com/gpu"


def test_requests_and_mappings_are_kube_schedulers() -> None:
    spec = {
        "initContainers": [
            {"name": "fetch", "resources": {"requests": {GPU: "5"}}},
            {"name": "warm", "resources": {"requests": {GPU: "4", "cpu": "1"}}},
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {GPU: "1"}}},
        ],
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "1", GPU: "2", "memory": "1"}}},
            {"name": "side", "resources": {"requests": {"cpu": "1"}}},
        ],
    }
    requests, mappings = requests_and_mappings(parse_container_requests(spec), [GPU], {GPU: "gpus"})
    # The long-lived ones ask their own; init containers first reuse the devices of those after
    # them (proxy's 1, main's 2), then ask the rest (fetch 2, warm 1); only the largest of
    # those is kept, and both are mapped to it.
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [
        ("container-0-request-0", 2),
        ("container-2-request-0", 1),
        ("container-3-request-1", 2),
    ]
    assert all(r["exactly"]["deviceClassName"] == "gpus" for r in requests)
    assert [(m["containerName"], m["requestName"]) for m in mappings] == [
        ("proxy", "container-2-request-0"),
        ("main", "container-3-request-1"),
        ("fetch", "container-2-request-0"),
        ("fetch", "container-3-request-1"),
        ("fetch", "container-0-request-0"),
        ("warm", "container-2-request-0"),
        ("warm", "container-3-request-1"),
        ("warm", "container-0-request-0"),
    ]


class ExtendedApi(ClaimsApi):
    """ClaimsApi, with claims created (generateName) and deleted as an API server does."""

    def __init__(self, **scripts: Any) -> None:
        super().__init__(**scripts)
        self.names = itertools.count(1)
        self.deleted: list[str] = []

    async def handle(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        if method == "POST" and path.endswith("/resourceclaims"):
            assert body is not None
            raw = copy.deepcopy(dict(body))
            meta = raw["metadata"]
            assert "name" not in meta and "uid" not in meta
            meta["name"] = f"{meta['generateName']}{next(self.names)}"
            meta["uid"] = f"claim-{meta['name']}"
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            raw.setdefault("status", {})
            self.add(raw)
            return 201, copy.deepcopy(raw)
        if method == "DELETE" and "/resourceclaims/" in path:
            name = path.rsplit("/", 1)[1]
            stored = self.claims.pop(name, None)
            if stored is None:
                return 404, {"message": "not found"}
            assert not stored["metadata"].get("finalizers"), "deleted with a finalizer"
            self.deleted.append(name)
            return 200, stored
        return await super().handle(method, path, body, params)


def gpu_pod(name: str, count: int = 2) -> dict[str, Any]:
    raw = raw_pod(name)
    raw["spec"]["containers"][0]["resources"]["requests"][GPU] = str(count)
    return raw


def cluster(api: ExtendedApi, devices: Mapping[str, int], plugin: int = 0) -> Scheduler:
    """Nodes with `devices` GPUs each in ResourceSlices, and (`plugin`) one node whose device
    plugin lists GPUs in its allocatable."""
    sched = scheduler(api)
    cls = device_class("gpus")
    cls["spec"]["extendedResourceName"] = GPU
    sched.device_classes.on_event("ADDED", cls)
    for node, count in devices.items():
        sched.on_node_event("ADDED", manifests.node(node))
        sched.devices.on_slice_event("ADDED", node_slice(node, count))
    if plugin:
        plugged = manifests.node("plugged")
        plugged["status"]["allocatable"][GPU] = str(plugin)
        sched.on_node_event("ADDED", plugged)
    return sched


async def test_a_pod_asking_gpus_by_extended_resource_gets_a_claim_as_kube_scheduler_makes() -> (
    None
):
    api = ExtendedApi()
    sched = cluster(api, {"n1": 1, "n2": 2})
    raw = gpu_pod("trainer")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: bool(api.binds("trainer")), timeout=10)
    assert api.binds("trainer")[0].body["target"]["name"] == "n2"  # type: ignore[index]
    await until(lambda: bool(api.events("Scheduled")))
    (scheduled,) = api.events("Scheduled")
    assert scheduled["message"].endswith(
        "; devices on n2: gpu.example.com/n2/gpu-0, gpu.example.com/n2/gpu-1"
        " (first fit: no figures)"
    ), scheduled["message"]
    (stored,) = api.claims.values()
    meta = stored["metadata"]
    assert meta["name"] == "trainer-extended-resources-1"
    assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "trainer",
        raw["metadata"]["uid"],
        True,
    )
    assert meta["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    (request,) = stored["spec"]["devices"]["requests"]
    assert request == {
        "name": "container-0-request-1",  # "app", its requests sorted: cpu, example.com/gpu, ...
        "exactly": {"deviceClassName": "gpus", "allocationMode": "ExactCount", "count": 2},
    }
    results = stored["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    assert {r["pool"] for r in results} == {"n2"}
    assert [r["uid"] for r in stored["status"]["reservedFor"]] == [raw["metadata"]["uid"]]
    patched = [
        c.body["status"]["extendedResourceClaimStatus"]  # type: ignore[index]
        for c in api.status_patches("trainer")
        if "extendedResourceClaimStatus" in c.body["status"]  # type: ignore[index]
    ]
    assert patched == [
        {
            "requestMappings": [
                {"containerName": "app", "resourceName": GPU, "requestName": request["name"]}
            ],
            "resourceClaimName": "trainer-extended-resources-1",
        }
    ]


async def test_a_node_whose_device_plugin_lists_the_resource_needs_no_claim() -> None:
    api = ExtendedApi()
    sched = cluster(api, {"n1": 1}, plugin=4)
    async with running(sched):
        sched.on_pod_event("ADDED", gpu_pod("trainer", 2))  # n1 has one GPU: only "plugged"
        await until(lambda: bool(api.binds("trainer")), timeout=10)
    assert api.binds("trainer")[0].body["target"]["name"] == "plugged"  # type: ignore[index]
    assert not api.claims


async def test_no_node_with_enough_gpus_is_said_and_a_claim_left_from_before_is_deleted() -> None:
    api = ExtendedApi()
    sched = cluster(api, {"n1": 1})
    raw = gpu_pod("trainer", 2)
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: bool(api.events("FailedScheduling")), timeout=10)
        message = api.events("FailedScheduling")[0]["message"]
        assert message.startswith("0/1 nodes are available: 1 cannot allocate all claims.")
        # A claim created for the pod by an earlier attempt (a scheduler that then stopped):
        owner = {
            "kind": "Pod",
            "name": "trainer",
            "uid": raw["metadata"]["uid"],
            "controller": True,
        }
        stale = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "namespace": "default",
                "name": "trainer-extended-resources-old",
                "uid": "claim-old",
                "resourceVersion": "5",
                "finalizers": ["resource.kubernetes.io/delete-protection"],
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                "ownerReferences": [owner],
            },
            "spec": {"devices": {"requests": [{"name": "container-0-request-1"}]}},
        }
        api.add(stale)
        sched.state.claims.on_event("ADDED", stale)
        await until(lambda: api.deleted == ["trainer-extended-resources-old"], timeout=10)
        messages = [e["message"] for e in api.events("FailedScheduling")]
        assert any("cannot schedule extended resource claim" in m for m in messages), messages


async def test_a_claim_made_for_a_pod_that_did_not_bind_is_deleted() -> None:
    api = ExtendedApi(trainer=[(500, {"message": "etcd is down"})])
    sched = cluster(api, {"n1": 2})
    async with running(sched):
        sched.on_pod_event("ADDED", gpu_pod("trainer", 1))
        await until(lambda: api.deleted == ["trainer-extended-resources-1"], timeout=10)
        await until(lambda: not sched.devices.inflight, timeout=5)
