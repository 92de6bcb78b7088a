"""DynamicResources through the Scheduler, with the real device allocator (dra-allocator, built by
hack/ensure-tools): devices allocated as kube-scheduler's allocator allocates them, never twice
while binds are in flight, written into the claims before the Binding, given back when the pod
does not bind; a missing class, a missing allocator and a shared claim, with kube-scheduler's
words."""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from loadwise.framework.pod_groups import UPSTREAM
from loadwise.scheduler.dynamic_resources.allocation import DeviceAllocation
from loadwise.scheduler.dynamic_resources.device_load import DeviceLoad, busiest
from loadwise.scheduler.dynamic_resources.helper import COMMAND_ENV, AllocatorProcess
from loadwise.scheduler.dynamic_resources.objects import DeviceObjects
from loadwise.scheduler.scheduler import Scheduler
from loadwise_dev import manifests

from ...fakes import Reply, until
from .test_pod_groups import member, pod_group
from .test_scheduler import Api, raw_pod, running, scheduler, uid

DRIVER = "gpu.example.com"


@pytest.fixture(autouse=True)
def allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.environ.get(COMMAND_ENV) or shutil.which("dra-allocator")
    assert path, "dra-allocator is not on PATH: run hack/ensure-tools and use its --print-env"
    monkeypatch.setenv(COMMAND_ENV, path)


def device_class(name: str = DRIVER) -> dict[str, Any]:
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    return {"metadata": {"name": name}, "spec": {"selectors": [selector]}}


def node_slice(node: str, devices: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}}}
                for i in range(devices)
            ],
        },
    }


def claim(name: str, cls: str = DRIVER, version: int = 1) -> dict[str, Any]:
    request = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": "default",
            "name": name,
            "uid": f"claim-{name}",
            "resourceVersion": str(version),
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def with_claim(raw: dict[str, Any], claim_name: str) -> dict[str, Any]:
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return raw


class ClaimsApi(Api):
    """The Api of test_scheduler, with ResourceClaims kept as an API server keeps them:
    conditional updates, the status written only through /status, strategic merge patches of
    reservedFor."""

    def __init__(self, **scripts: Any) -> None:
        super().__init__(**scripts)
        self.claims: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.on_status: Callable[[str], None] = lambda name: None  # a status was written

    def add(self, raw: dict[str, Any]) -> None:
        self.claims[raw["metadata"]["name"]] = copy.deepcopy(raw)

    async def handle(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        if "/resourceclaims/" not in path:
            return await super().handle(method, path, body, params)
        name = path.split("/resourceclaims/")[1].split("/")[0]
        stored = self.claims.get(name)
        if stored is None:
            return 404, {"message": "not found"}
        if method == "GET":
            return 200, copy.deepcopy(stored)
        assert body is not None
        if method == "PATCH":  # Unreserve's reservedFor deletion
            gone = {r["uid"] for r in body["status"]["reservedFor"]}
            reserved = stored["status"].get("reservedFor") or []
            stored["status"]["reservedFor"] = [r for r in reserved if r["uid"] not in gone]
        else:
            if body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]:
                return 409, {"message": "the object has been modified"}
            if path.endswith("/status"):
                stored["status"] = copy.deepcopy(body.get("status") or {})
                self.on_status(name)
            else:
                stored["metadata"] = copy.deepcopy(body["metadata"])
        self.version += 1
        stored["metadata"]["resourceVersion"] = str(self.version)
        return 200, copy.deepcopy(stored)


def cluster(api: ClaimsApi, devices: Mapping[str, int], settle: float = 1.0) -> Scheduler:
    sched = scheduler(api)
    if settle != 1.0:
        sched = Scheduler(
            sched.name,
            sched.binder,
            sched.usage.caches,
            sched.queue,
            sched.settings.model_copy(update={"device_settle": settle}),
            rng=sched.rng,
        )
    sched.device_classes.on_event("ADDED", device_class())
    for node, count in devices.items():
        sched.on_node_event("ADDED", manifests.node(node))
        sched.devices.on_slice_event("ADDED", node_slice(node, count))
    return sched


def add_claim(sched: Scheduler, api: ClaimsApi, raw: dict[str, Any]) -> None:
    api.add(raw)
    sched.state.claims.on_event("ADDED", raw)


def allocated_devices(api: ClaimsApi) -> list[str]:
    return [
        f"{r['pool']}/{r['device']}"
        for c in api.claims.values()
        for r in ((c.get("status") or {}).get("allocation") or {"devices": {}})["devices"].get(
            "results", ()
        )
    ]


async def test_devices_are_allocated_written_and_never_handed_out_twice() -> None:
    api = ClaimsApi()
    sched = cluster(api, {"n1": 2, "n2": 1, "n3": 0})
    pods = []
    for i in range(4):
        add_claim(sched, api, claim(f"c{i}"))
        pods.append(with_claim(raw_pod(f"trainer-{i}"), f"c{i}"))
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.fake.requests("POST", "/binding")) == 3, timeout=10)
        await until(lambda: bool(api.events("FailedScheduling")), timeout=10)
    devices = allocated_devices(api)
    assert sorted(devices) == ["n1/gpu-0", "n1/gpu-1", "n2/gpu-0"]  # each once, none on n3
    failed = api.events("FailedScheduling")[0]["message"]
    assert failed == "0/3 nodes are available: 3 cannot allocate all claims."
    for name, stored in api.claims.items():
        if stored.get("status", {}).get("allocation"):
            assert stored["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
            (consumer,) = stored["status"]["reservedFor"]
            assert consumer["resource"] == "pods" and consumer["name"].startswith("trainer-")
            # the pod was bound where its devices are
            pod = consumer["name"]
            node = api.binds(pod)[0].body["target"]["name"]  # type: ignore[index]
            pools = {r["pool"] for r in stored["status"]["allocation"]["devices"]["results"]}
            assert pools == {node}, name


async def test_an_allocation_the_informer_shows_is_no_longer_in_flight_and_is_shared() -> None:
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1, "n2": 1})
    add_claim(sched, api, claim("shared"))
    first = with_claim(raw_pod("first"), "shared")
    async with running(sched):
        sched.on_pod_event("ADDED", first)
        await until(lambda: bool(api.binds("first")))
        node = api.binds("first")[0].body["target"]["name"]  # type: ignore[index]
        sched.state.claims.on_event("MODIFIED", copy.deepcopy(api.claims["shared"]))
        assert not sched.devices.inflight  # the informer shows it: no longer in flight
        second = with_claim(raw_pod("second"), "shared")
        sched.on_pod_event("ADDED", second)
        await until(lambda: bool(api.binds("second")))
    assert api.binds("second")[0].body["target"]["name"] == node  # type: ignore[index]
    reserved = [r["uid"] for r in api.claims["shared"]["status"]["reservedFor"]]
    assert reserved == [uid(first), uid(second)]
    assert len(allocated_devices(api)) == 1


async def test_a_failed_bind_gives_the_devices_back_through_the_claim() -> None:
    api = ClaimsApi(trainer=[(500, {"message": "etcd is down"})])
    sched = cluster(api, {"n1": 1})
    add_claim(sched, api, claim("c"))
    raw = with_claim(raw_pod("trainer"), "c")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.binds("trainer")) >= 1)
        await until(lambda: not api.claims["c"]["status"].get("reservedFor"), timeout=5)
        # written, then undone: held in flight until the informer shows the undoing write
        assert "claim-c" in sched.devices.inflight
        sched.state.claims.on_event("MODIFIED", copy.deepcopy(api.claims["c"]))
        assert "claim-c" not in sched.devices.inflight


async def test_a_missing_class_and_a_missing_allocator_are_said_and_other_pods_bind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1})
    add_claim(sched, api, claim("c", cls="fpga.example.com"))
    async with running(sched):
        sched.on_pod_event("ADDED", with_claim(raw_pod("trainer"), "c"))
        await until(lambda: bool(api.events("FailedScheduling")))
    assert api.events("FailedScheduling")[0]["message"] == (
        "0/1 nodes are available: request gpu: device class fpga.example.com does not exist."
    )
    monkeypatch.setenv(COMMAND_ENV, "/nonexistent/dra-allocator")
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1})
    add_claim(sched, api, claim("c"))
    async with running(sched):
        sched.on_pod_event("ADDED", with_claim(raw_pod("trainer"), "c"))
        sched.on_pod_event("ADDED", raw_pod("web"))
        await until(lambda: bool(api.binds("web")) and bool(api.events("FailedScheduling")))
    message = api.events("FailedScheduling")[0]["message"]
    assert message.startswith(
        'running PreFilter plugin "DynamicResources": the device allocator is unavailable: '
        "dra-allocator cannot be started (/nonexistent/dra-allocator)"
    )
    assert not api.binds("trainer")
    await sched.close()


async def test_an_idle_claim_allocated_elsewhere_is_deallocated_then_allocated_anew() -> None:
    """PostFilter, before preemption: a claim allocated on a node the pod cannot use, and
    reserved for no pod, is deallocated; the claim's event brings the pod back, and it gets
    devices on a node it can use."""
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1, "n2": 1})
    idle = claim("idle")
    idle["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                ]
            },
        }
    }
    add_claim(sched, api, idle)
    raw = with_claim(raw_pod("trainer"), "idle")
    raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: bool(api.events("FailedScheduling")))
        message = api.events("FailedScheduling")[0]["message"]
        assert message.startswith(
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
            "1 resourceclaim not available on the node. preemption: deallocation of "
            "ResourceClaim completed"
        ), message
        await until(lambda: not api.claims["idle"]["status"].get("allocation"))
        sched.state.claims.on_event("MODIFIED", copy.deepcopy(api.claims["idle"]))
        await until(lambda: bool(api.binds("trainer")), timeout=5)
    assert api.binds("trainer")[0].body["target"]["name"] == "n1"  # type: ignore[index]
    assert allocated_devices(api) == ["n1/gpu-0"]


def allocated_to(name: str, node: str, device: str) -> dict[str, Any]:
    raw = claim(name)
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    raw["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": device}]
            },
            "nodeSelector": {"nodeSelectorTerms": [term]},
        }
    }
    return raw


async def test_a_device_another_scheduler_allocated_at_the_same_time_is_given_back() -> None:
    """Two schedulers on one node's devices (DRA assumes one owner per node): kube-scheduler's
    write for the same device lands while ours does. After the settle, loadwise sees it,
    gives its own back (Unreserve) and does not bind; the pod is retried."""
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1}, settle=0.05)
    add_claim(sched, api, claim("ours"))
    # another scheduler allocated on this pool before: it is shared
    sched.state.claims.on_event("ADDED", allocated_to("earlier", "n1", "gpu-9"))
    sched.state.claims.on_event("DELETED", allocated_to("earlier", "n1", "gpu-9"))
    raced: list[str] = []

    def race(name: str) -> None:
        if name == "ours" and not raced:
            raced.append(name)
            sched.state.claims.on_event("ADDED", allocated_to("theirs", "n1", "gpu-0"))

    api.on_status = race
    raw = with_claim(raw_pod("trainer"), "ours")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: bool(api.events("FailedScheduling")), timeout=5)
        await until(lambda: not api.claims["ours"]["status"].get("reservedFor"), timeout=5)
    message = api.events("FailedScheduling")[0]["message"]
    assert message == (
        'running PreBind plugin "DynamicResources": device gpu.example.com/n1/gpu-0 (claim '
        "default/theirs) was allocated twice, by another scheduler too: undone"
    ), message
    assert not api.binds("trainer")
    # cleared at once: a retry must not find the claim still allocated to that device
    assert not api.claims["ours"]["status"].get("allocation")
    sched.state.claims.on_event("MODIFIED", copy.deepcopy(api.claims["ours"]))
    assert "claim-ours" not in sched.devices.inflight


async def test_a_pool_no_other_scheduler_allocates_on_binds_without_waiting() -> None:
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1}, settle=30.0)
    add_claim(sched, api, claim("ours"))
    async with running(sched):
        sched.on_pod_event("ADDED", with_claim(raw_pod("trainer"), "ours"))
        await until(lambda: bool(api.binds("trainer")), timeout=5)  # not 30 s


async def test_a_gang_whose_members_claim_devices_gets_one_device_each_all_or_nothing() -> None:
    """Each member is prepared just before it is tried, so it sees the devices of the members
    before it in flight: three members, three devices on two nodes, none given twice. A
    fourth member's group of four cannot be placed: nothing is written or held."""
    api = ClaimsApi()
    sched = cluster(api, {"n1": 2, "n2": 1})
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("train", 3))
    members = []
    for i in range(3):
        add_claim(sched, api, claim(f"c{i}"))
        raw = with_claim(member(f"w{i}", "train", cpu="100m"), f"c{i}")
        members.append(raw)
    async with running(sched):
        for raw in members:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.fake.requests("POST", "/binding")) == 3, timeout=5)
    assert sorted(allocated_devices(api)) == ["n1/gpu-0", "n1/gpu-1", "n2/gpu-0"]

    api = ClaimsApi()
    sched = cluster(api, {"n1": 2, "n2": 1})
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("big", 4))
    for i in range(4):
        add_claim(sched, api, claim(f"c{i}"))
    async with running(sched):
        for i in range(4):
            sched.on_pod_event("ADDED", with_claim(member(f"b{i}", "big", cpu="100m"), f"c{i}"))
        await until(lambda: bool(api.events("FailedScheduling")), timeout=5)
    assert not api.fake.requests("POST", "/binding")
    assert allocated_devices(api) == [] and not sched.devices.inflight


def with_binding_condition(raw: dict[str, Any], node: str) -> dict[str, Any]:
    """The node's GPUs need a driver's condition ("attached") before a pod may bind."""
    for device in raw["spec"]["devices"]:
        device["bindingConditions"] = ["attached"]
        device["bindingFailureConditions"] = ["attach-failed"]
    return raw


def reserved(api: ClaimsApi, name: str) -> bool:
    return bool(api.claims[name].get("status", {}).get("reservedFor"))


def device_status(condition: str, status: str = "True") -> list[dict[str, Any]]:
    return [
        {
            "driver": DRIVER,
            "pool": "n1",
            "device": "gpu-0",
            "conditions": [
                {
                    "type": condition,
                    "status": status,
                    "reason": "Driver",
                    "message": "said so",
                    "lastTransitionTime": "2026-11-29T00:00:00Z",
                }
            ],
        }
    ]


async def test_devices_with_binding_conditions_bind_once_ready_and_fail_when_the_driver_says() -> (
    None
):
    """PreBind waits until the driver reports each binding condition True in the claim's
    status.devices; a failure condition fails the attempt with kube-scheduler's words."""
    api = ClaimsApi()
    sched = cluster(api, {})
    sched.on_node_event("ADDED", manifests.node("n1"))
    sched.devices.on_slice_event("ADDED", with_binding_condition(node_slice("n1", 1), "n1"))
    add_claim(sched, api, claim("ready"))
    async with running(sched):
        sched.on_pod_event("ADDED", with_claim(raw_pod("trainer"), "ready"))
        await until(lambda: reserved(api, "ready"), timeout=5)
        await asyncio.sleep(0.3)
        assert not api.binds("trainer")  # waiting for the driver
        ready = copy.deepcopy(api.claims["ready"])
        ready["status"]["devices"] = device_status("attached")
        sched.state.claims.on_event("MODIFIED", ready)
        await until(lambda: bool(api.binds("trainer")), timeout=5)

    api = ClaimsApi()
    sched = cluster(api, {})
    sched.on_node_event("ADDED", manifests.node("n1"))
    sched.devices.on_slice_event("ADDED", with_binding_condition(node_slice("n1", 1), "n1"))
    add_claim(sched, api, claim("doomed"))
    async with running(sched):
        sched.on_pod_event("ADDED", with_claim(raw_pod("trainer"), "doomed"))
        await until(lambda: reserved(api, "doomed"), timeout=5)
        failed = copy.deepcopy(api.claims["doomed"])
        failed["status"]["devices"] = device_status("attach-failed")
        sched.state.claims.on_event("MODIFIED", failed)
        await until(lambda: bool(api.events("FailedScheduling")), timeout=5)
    assert api.events("FailedScheduling")[0]["message"] == (
        'running PreBind plugin "DynamicResources": device binding failed: claim=doomed, '
        "reason=Driver, message='said so'"
    )
    assert not api.binds("trainer")


class FixedLoad(DeviceLoad):
    """Device utilisation as given (the dev exporter and Prometheus stand in for it in the
    cluster test), sent to the allocator as the real one sends Prometheus' figures."""

    def __init__(self, busy: Mapping[str, float]) -> None:
        super().__init__((), 15.0)
        self.busy = dict(busy)

    async def refresh_if_due(self, objects: DeviceObjects, allocator: AllocatorProcess) -> None:
        if self.scores != self.busy or allocator.starts != self._start:
            await allocator.call("scores", deviceScores=self.busy)
            self.scores, self._start = dict(self.busy), allocator.starts


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ({"hotThreshold": 90, "strategy": "Pack"}, "n2"),  # n1's one GPU is hot: passed over
        ({"hotThreshold": 100, "strategy": "Pack"}, "n1"),  # no hot devices: n1 fills up
        ({"hotThreshold": 100, "strategy": "Spread"}, "n2"),  # the least busy devices
    ],
)
async def test_devices_pack_or_spread_and_a_hot_one_is_passed_over_as_hot_nodes_are(
    devices: dict[str, Any], expected: str
) -> None:
    api = ClaimsApi()
    sched = cluster(api, {"n1": 1, "n2": 2})
    sched.policies.apply("gpus", {"devices": devices})
    load = FixedLoad(
        {f"{DRIVER}/n1/gpu-0": 95.0, f"{DRIVER}/n2/gpu-0": 20.0, f"{DRIVER}/n2/gpu-1": 30.0}
    )
    for plugin in sched.profile.plugins:
        if isinstance(plugin, DeviceAllocation):
            plugin.load = load
    add_claim(sched, api, claim("c"))
    async with running(sched):
        sched.on_pod_event("ADDED", with_claim(raw_pod("trainer"), "c"))
        await until(lambda: bool(api.binds("trainer")), timeout=10)
        await until(lambda: bool(api.events("Scheduled")))
    assert api.binds("trainer")[0].body["target"]["name"] == expected  # type: ignore[index]
    (scheduled,) = api.events("Scheduled")
    assert ("1 hot node(s) passed over" in scheduled["message"]) == (
        expected == "n2" and devices["strategy"] == "Pack"
    ), scheduled["message"]


async def test_preemption_never_evicts_for_a_node_whose_devices_cannot_serve_the_pod() -> None:
    """The dry runs judge a node by every filter the cycle runs: n1 has room once its
    low-priority pod goes, but no GPU; n2's GPU is free, and its pod outranks the preemptor.
    Nothing is evicted (the dry runs once left DynamicResources out and evicted on n1)."""
    api = ClaimsApi()
    sched = cluster(api, {"n2": 1})
    sched.on_node_event("ADDED", manifests.node("n1"))
    for name, node, priority in (("low", "n1", 0), ("high", "n2", 5000)):
        raw = raw_pod(name, cpu="4")
        raw["spec"]["priority"], raw["spec"]["nodeName"] = priority, node
        sched.on_pod_event("ADDED", raw)
    add_claim(sched, api, claim("c"))
    preemptor = with_claim(raw_pod("trainer", cpu="1"), "c")
    preemptor["spec"]["priority"] = 1000
    async with running(sched):
        sched.on_pod_event("ADDED", preemptor)
        await until(lambda: bool(api.events("FailedScheduling")), timeout=10)
    message = api.events("FailedScheduling")[0]["message"]
    assert "preemption: 0/2 nodes are available" in message, message
    assert not api.fake.requests("DELETE", "/pods/low")
    assert not api.status_patches("low")


def test_a_device_is_as_busy_as_the_larger_of_its_utilisation_and_memory_in_use() -> None:
    series = [
        ({"UUID": "GPU-a"}, 20.0),  # utilisation
        ({"UUID": "GPU-b"}, 70.0),
        ({"UUID": "GPU-a"}, 95.0),  # memory in use
        ({"UUID": "GPU-b"}, float("nan")),  # 0/0: an exporter that reports no memory yet
        ({"gpu": "0"}, 50.0),  # a series without the label: no device
    ]
    assert busiest(series, "UUID") == {"GPU-a": 95.0, "GPU-b": 70.0}
