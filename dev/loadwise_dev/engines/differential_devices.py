"""Device scenarios for bench/differential (dynamic resource allocation, `resource.k8s.io/v1`):
devices the incoming pods' claims ask for, the same for both schedulers.

A scenario's world (`gen_world`, from a random stream of its own so the other scenarios stay as
they were): GPU ResourceSlices on some nodes (attributes model, index, numa and a driver
version; a memory capacity; some devices tainted), sometimes a pool of NICs shared through a node
selector, DeviceClasses (every GPU, A100s only, NICs), claims already allocated to some devices
(written as a scheduler writes them), one of them reserved for a placed pod and so shareable.
Each incoming pod may get (`gen_claims`) a ResourceClaimTemplate of its own, which both copies
name (each gets its own claim from the resourceclaim controller): counts, All, firstAvailable,
CEL on attributes and capacity (quantity, semver, cel.bind, optionals), matchAttribute across
two requests, a toleration of the taint, a NIC, a missing class; or the shared claim. Some pods
ask instead (or as well), from a stream of their own (`gen_extended`), a count of an extended
resource the A100 class backs (`example.com/a100-<s>`) or of the GPU class's implicit name, in
one container or split between an init container and the app container; some nodes without
GPUs list the extended resource in their allocatable, as a device plugin would publish it.

An allocation loadwise writes is checked here (`check`), independently of both schedulers'
allocators: every device exists and is on the pod's node (or in the shared pool its labels
select), none was allocated already or twice, taints are tolerated, each request got its count
of devices its Python twin of the CEL selects, matchAttribute holds. Devices may differ from
kube-scheduler's (loadwise ranks them by load); feasibility may not.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import manifests
from ..kube import Kube, KubeError

DEVICE_STREAM = 0xD7A
EXTENDED_STREAM = 0x5004  # extended resources backed by a class (KEP-5004)
EXTENDED_SHARE = 0.3  # device scenarios' pods asking some
IMPLICIT = "deviceclass.resource.kubernetes.io/"
DEVICE_SHARE = 0.4  # scenarios with devices, and pods with claims in them
GPU, NIC = "gpu.example.com", "nic.example.com"
RESOURCE = "/apis/resource.k8s.io/v1"
TAINT = {"key": f"{GPU}/unhealthy", "value": "true", "effect": "NoSchedule"}
MODELS = ("a100", "h100", "t4")
MEMORY = {"16Gi": 16, "40Gi": 40, "80Gi": 80}
VERSIONS = ("535.104.0", "550.54.0")

Device = dict[str, Any]  # attributes as plain values, and where it is
Predicate = Callable[[Device], bool]


@dataclass
class Request:
    name: str
    count: int | None  # None: All
    select: Predicate
    alternatives: list[tuple[str, int, Predicate]] = field(default_factory=list)  # firstAvailable
    tolerates: bool = False
    nic: bool = False


@dataclass
class Ask:
    """What a pod's claim asks, for the checker."""

    requests: list[Request]
    match_numa: bool = False


@dataclass
class World:
    scenario: int
    ns: str
    classes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    allocated: list[dict[str, Any]] = field(default_factory=list)  # claims written allocated
    holder: dict[str, Any] | None = None  # the placed pod the shared claim is reserved for
    shared: str | None = None  # that claim's name
    devices: dict[str, Device] = field(default_factory=dict)  # driver/pool/device -> device
    taken: set[str] = field(default_factory=set)
    nic_nodes: set[str] = field(default_factory=set)
    asks: dict[str, Ask] = field(default_factory=dict)  # template name -> what it asks


def _gpu(name: str, index: int, model: str, numa: int, version: str, memory: str) -> Any:
    return {
        "name": name,
        "attributes": {
            "model": {"string": model},
            "index": {"int": index},
            "numa": {"int": numa},
            "driverVersion": {"version": version},
        },
        "capacity": {"memory": {"value": memory}},
    }


def gen_world(rng: random.Random, nodes: list[dict[str, Any]], s: int, ns: str) -> World:
    world = World(s, ns)
    gpu_sel = f'device.driver == "{GPU}"'
    world.classes = [
        {
            "metadata": {"name": f"gpu-{s}"},
            "spec": {"selectors": [{"cel": {"expression": gpu_sel}}]},
        },
        {
            "metadata": {"name": f"a100-{s}"},
            "spec": {
                "extendedResourceName": f"example.com/a100-{s}",
                "selectors": [
                    {"cel": {"expression": gpu_sel}},
                    {"cel": {"expression": f'device.attributes["{GPU}"].model == "a100"'}},
                ],
            },
        },
        {
            "metadata": {"name": f"nic-{s}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
        },
    ]
    for node in nodes:
        name = node["metadata"]["name"]
        if rng.random() < 0.35:
            continue
        devices = []
        for i in range(rng.randint(1, 4)):
            model, numa = rng.choice(MODELS), rng.randint(0, 1)
            version, memory = rng.choice(VERSIONS), rng.choice(list(MEMORY))
            device = _gpu(f"gpu-{i}", i, model, numa, version, memory)
            tainted = rng.random() < 0.12
            if tainted:
                device["taints"] = [TAINT]
            devices.append(device)
            world.devices[f"{GPU}/{name}/gpu-{i}"] = {
                "node": name, "model": model, "index": i, "numa": numa, "version": version,
                "memory": MEMORY[memory], "tainted": tainted, "driver": GPU,
            }  # fmt: skip
        world.slices.append(
            {
                "metadata": {"name": f"s{s}-{name}-gpus"},
                "spec": {
                    "driver": GPU,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": name,
                    "devices": devices,
                },
            }
        )
    if rng.random() < 0.3:  # NICs shared by the nodes with an SSD
        selector = {"key": "disk", "operator": "In", "values": ["ssd"]}
        world.slices.append(
            {
                "metadata": {"name": f"s{s}-nics"},
                "spec": {
                    "driver": NIC,
                    "pool": {"name": f"s{s}-nics", "generation": 1, "resourceSliceCount": 1},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]},
                    "devices": [{"name": f"nic-{i}"} for i in range(2)],
                },
            }
        )
        for i in range(2):
            world.devices[f"{NIC}/s{s}-nics/nic-{i}"] = {"node": None, "driver": NIC}
        world.nic_nodes = {
            n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get("disk") == "ssd"
        }
    _allocate_some(rng, world, nodes)
    return world


def _allocate_some(rng: random.Random, world: World, nodes: list[dict[str, Any]]) -> None:
    """Claims already allocated to about a quarter of the GPUs; the first is reserved for a
    placed pod (the holder), so an incoming pod can share it."""
    gpus = [k for k, d in world.devices.items() if d["driver"] == GPU and not d["tainted"]]
    for n, key in enumerate(k for k in gpus if rng.random() < 0.25):
        _, pool, device = key.split("/")
        name = f"taken-{world.scenario}-{n}"
        world.taken.add(key)
        world.allocated.append(
            {
                "metadata": {"name": name, "namespace": world.ns},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": f"gpu-{world.scenario}"}}
                        ]
                    }
                },
                "status": {
                    "allocation": {
                        "allocationTimestamp": "2026-11-29T00:00:00Z",  # as schedulers write
                        "devices": {
                            "results": [
                                {"request": "gpu", "driver": GPU, "pool": pool, "device": device}
                            ]
                        },
                        "nodeSelector": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": [pool]}
                                    ]
                                }
                            ]
                        },
                    }
                },
            }
        )
        if world.shared is None:
            world.shared = name
            holder = manifests.pod(f"holder-{world.scenario}", namespace=world.ns, cpu="10m")
            holder["spec"]["nodeName"] = pool
            world.holder = holder


async def create_world(kube: Kube, world: World) -> None:
    for cls in world.classes:
        await kube.create(f"{RESOURCE}/deviceclasses", cls)
    for body in world.slices:
        await kube.create(f"{RESOURCE}/resourceslices", body)
    holder_uid = ""
    if world.holder is not None:
        made = await kube.create(f"/api/v1/namespaces/{world.ns}/pods", world.holder)
        holder_uid = made["metadata"]["uid"]
    for claim in world.allocated:
        body = copy.deepcopy(claim)
        status = body.pop("status")
        name = body["metadata"]["name"]
        await kube.create(f"{RESOURCE}/namespaces/{world.ns}/resourceclaims", body)
        if name == world.shared:
            holder = world.holder
            assert holder is not None
            status["reservedFor"] = [
                {"resource": "pods", "name": holder["metadata"]["name"], "uid": holder_uid}
            ]
        path = f"{RESOURCE}/namespaces/{world.ns}/resourceclaims/{name}/status"
        await kube.merge_patch(path, {"status": status})


def _exactly(cls: str, count: int | None = 1, cel: str | None = None, **more: Any) -> Any:
    spec: dict[str, Any] = {"deviceClassName": cls}
    if count is None:
        spec["allocationMode"] = "All"
    else:
        spec["allocationMode"], spec["count"] = "ExactCount", count
    if cel is not None:
        spec["selectors"] = [{"cel": {"expression": cel}}]
    spec.update(more)
    return spec


def gen_claims(rng: random.Random, world: World, i: int) -> tuple[list[Any], dict[str, Any] | None]:
    """The pod's `spec.resourceClaims`, and the template to create first (None: it names the
    shared claim, or a template whose class does not exist, which is made too)."""
    s = world.scenario
    gpu, a100, nic = f"gpu-{s}", f"a100-{s}", f"nic-{s}"
    attr = f'device.attributes["{GPU}"]'
    kind = rng.randrange(14)
    if kind == 13 and world.shared is not None:
        return [{"name": "shared", "resourceClaimName": world.shared}], None
    any_gpu: Predicate = lambda d: d["driver"] == GPU  # noqa: E731
    requests: list[Any]
    ask: Ask
    match kind:
        case 0 | 1:
            count = kind + 1
            requests = [{"name": "gpu", "exactly": _exactly(gpu, count)}]
            ask = Ask([Request("gpu", count, any_gpu)])
        case 2:
            requests = [{"name": "gpu", "exactly": _exactly(a100)}]
            ask = Ask([Request("gpu", 1, lambda d: d.get("model") == "a100")])
        case 3:
            cel = f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0'
            requests = [{"name": "gpu", "exactly": _exactly(gpu, 1, cel)}]
            ask = Ask([Request("gpu", 1, lambda d: d.get("memory", 0) >= 40)])
        case 4:
            cel = f'{attr}.driverVersion.isGreaterThan(semver("540.0.0"))'
            requests = [{"name": "gpu", "exactly": _exactly(gpu, 1, cel)}]
            ask = Ask([Request("gpu", 1, lambda d: d.get("version") == "550.54.0")])
        case 5:
            cel = f'cel.bind(a, {attr}, a.model == "h100" || a.index == 0)'
            requests = [{"name": "gpu", "exactly": _exactly(gpu, 1, cel)}]
            ask = Ask(
                [Request("gpu", 1, lambda d: d.get("model") == "h100" or d.get("index") == 0)]
            )
        case 6:
            cel = f'{attr}.?model.orValue("") == "t4"'
            requests = [{"name": "gpu", "exactly": _exactly(gpu, 1, cel)}]
            ask = Ask([Request("gpu", 1, lambda d: d.get("model") == "t4")])
        case 7:
            cel = f'{attr}.model == "t4"'
            requests = [{"name": "gpu", "exactly": _exactly(gpu, None, cel)}]
            ask = Ask([Request("gpu", None, lambda d: d.get("model") == "t4")])
        case 8:
            h100 = f'{attr}.model == "h100"'
            requests = [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "big", **_exactly(gpu, 1, h100)},
                        {"name": "two", **_exactly(gpu, 2)},
                    ],
                }
            ]
            alternatives = [
                ("big", 1, lambda d: d.get("model") == "h100"),
                ("two", 2, any_gpu),
            ]
            ask = Ask([Request("gpu", 1, any_gpu, alternatives)])
        case 9:
            requests = [
                {"name": "a", "exactly": _exactly(gpu)},
                {"name": "b", "exactly": _exactly(gpu)},
            ]
            ask = Ask([Request("a", 1, any_gpu), Request("b", 1, any_gpu)], match_numa=True)
        case 10:
            toleration = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
            requests = [{"name": "gpu", "exactly": _exactly(gpu, 1, tolerations=[toleration])}]
            ask = Ask([Request("gpu", 1, any_gpu, tolerates=True)])
        case 11:
            requests = [{"name": "nic", "exactly": _exactly(nic)}]
            ask = Ask([Request("nic", 1, lambda d: d["driver"] == NIC, nic=True)])
        case _:  # 12, and 13 without a shared claim: a class that does not exist
            requests = [{"name": "gpu", "exactly": _exactly(f"missing-{s}")}]
            ask = Ask([Request("gpu", 1, lambda d: False)])
    spec: dict[str, Any] = {"devices": {"requests": requests}}
    if ask.match_numa:
        spec["devices"]["constraints"] = [{"requests": ["a", "b"], "matchAttribute": f"{GPU}/numa"}]
    name = f"t-{s}-{i}"
    world.asks[name] = ask
    template = {"metadata": {"name": name, "namespace": world.ns}, "spec": {"spec": spec}}
    return [{"name": "devices", "resourceClaimTemplateName": name}], template


def plugin_nodes(rng: random.Random, world: World, nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Nodes without GPUs whose device plugin lists the A100 class's extended resource:
    node -> how many (their allocatable and capacity, patched in)."""
    with_gpus = {d["node"] for d in world.devices.values()}
    return {
        n["metadata"]["name"]: str(rng.randint(1, 2))
        for n in nodes
        if n["metadata"]["name"] not in with_gpus and rng.random() < 0.3
    }


def gen_extended(rng: random.Random, world: World, pod: dict[str, Any]) -> None:
    """Extended resources in the pod's containers: an A100 count by the class's explicit name,
    or any GPU by the GPU class's implicit one; sometimes an init container asks too."""
    s = world.scenario
    resource = f"example.com/a100-{s}" if rng.random() < 0.6 else f"{IMPLICIT}gpu-{s}"
    count = rng.choice((1, 1, 2))
    containers = [pod["spec"]["containers"][0]]
    if rng.random() < 0.3:
        init = {"name": "init", "image": containers[0].get("image", "pause"),
                "resources": {"requests": {}}}  # fmt: skip
        pod["spec"]["initContainers"] = [init]
        containers.append(init)
    for n, container in enumerate(containers):
        amount = str(count + n)  # the init container asks one more: its own request
        resources = container.setdefault("resources", {})
        resources.setdefault("requests", {})[resource] = amount
        resources.setdefault("limits", {})[resource] = amount


async def claims_of(kube: Kube, pod: dict[str, Any]) -> list[dict[str, Any]]:
    ns = pod["metadata"]["namespace"]
    out = []
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        with contextlib.suppress(KubeError):
            path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/{extended['resourceClaimName']}"
            out.append(await kube.get(path))
    for status in pod.get("status", {}).get("resourceClaimStatuses") or ():
        with contextlib.suppress(KubeError):
            path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/{status['resourceClaimName']}"
            out.append(await kube.get(path))
    for entry in pod["spec"].get("resourceClaims") or ():
        if entry.get("resourceClaimName"):
            path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/{entry['resourceClaimName']}"
            out.append(await kube.get(path))
    return out


def check(world: World, pod: dict[str, Any], node: str, claims: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the allocations of a pod bound to `node` (empty: nothing)."""
    problems: list[str] = []
    used: set[str] = set()
    for claim in claims:
        name = claim["metadata"]["name"]
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            problems.append(f"claim {name} is not allocated")
            continue
        if name == world.shared:
            continue  # allocated by the world: the pod must only be where it is
        annotations = claim["metadata"].get("annotations") or {}
        ask = None
        if annotations.get("resource.kubernetes.io/extended-resource-claim") == "true":
            ask = _extended_ask(world, pod, claim)
        template = next(
            (
                e.get("resourceClaimTemplateName")
                for e in pod["spec"].get("resourceClaims") or ()
                if e.get("resourceClaimTemplateName")
            ),
            None,
        )
        if ask is None:
            ask = world.asks.get(str(template))
        results = allocation["devices"]["results"]
        keys = [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]
        for key in keys:
            device = world.devices.get(key)
            if device is None:
                problems.append(f"{key} does not exist")
            elif device["node"] is not None and device["node"] != node:
                problems.append(f"{key} is on {device['node']}, not {node}")
            elif device["node"] is None and node not in world.nic_nodes:
                problems.append(f"{key} is not shared with {node}")
            if key in world.taken or key in used:
                problems.append(f"{key} was allocated already")
            used.add(key)
        if ask is not None:
            problems += _check_ask(world, ask, results, node)
    return problems


def _extended_ask(world: World, pod: dict[str, Any], claim: dict[str, Any]) -> Ask:
    """What the claim for the pod's extended resources must give: per request, as many devices
    of its class as the container it serves asks beyond what the app container's request
    gives it (the init container asks one more than the app container here)."""
    s = world.scenario
    select: dict[str, Predicate] = {
        f"a100-{s}": lambda d: d.get("model") == "a100",
        f"gpu-{s}": lambda d: d["driver"] == GPU,
    }
    resource_of = {f"a100-{s}": f"example.com/a100-{s}", f"gpu-{s}": f"{IMPLICIT}gpu-{s}"}
    init = (pod["spec"].get("initContainers") or [{}])[0]
    app = pod["spec"]["containers"][0]
    requests = []
    for request in claim["spec"]["devices"]["requests"]:
        exactly = request["exactly"]
        cls = exactly["deviceClassName"]
        resource = resource_of.get(cls, "")
        index = int(request["name"].split("-")[1])  # container-<i>-request-<j>
        container = init if index == 0 and init else app
        wanted = int(container["resources"]["requests"].get(resource, 0))
        if container is init:  # it reuses the app container's devices first
            wanted -= int(app["resources"]["requests"].get(resource, 0))
        requests.append(Request(request["name"], wanted, select.get(cls, lambda d: False)))
    return Ask(requests)


def _check_ask(world: World, ask: Ask, results: list[Any], node: str) -> list[str]:
    problems = []
    for request in ask.requests:
        mine = [r for r in results if r["request"].split("/")[0] == request.name]
        devices = [world.devices.get(f"{r['driver']}/{r['pool']}/{r['device']}") for r in mine]
        found = [d for d in devices if d is not None]
        count, select = request.count, request.select
        if request.alternatives:
            chosen = {r["request"].split("/")[-1] for r in mine}
            alternative = next((a for a in request.alternatives if a[0] in chosen), None)
            if alternative is None:
                problems.append(f"request {request.name}: no alternative chosen")
                continue
            _, count, select = alternative
        if count is None:  # All: every matching device of the node that is free
            every = [
                d
                for k, d in world.devices.items()
                if d.get("node") == node and select(d) and k not in world.taken and not d["tainted"]
            ]
            count = len(every)
        if len(found) != count:
            problems.append(f"request {request.name}: {len(found)} devices, not {count}")
        for device in found:
            if not select(device):
                problems.append(f"request {request.name}: {device} does not match")
            if device.get("tainted") and not request.tolerates:
                problems.append(f"request {request.name}: {device} is tainted")
    if ask.match_numa:
        numas = {
            world.devices[f"{r['driver']}/{r['pool']}/{r['device']}"].get("numa") for r in results
        }
        if len(numas) > 1:
            problems.append(f"matchAttribute numa: {sorted(str(n) for n in numas)}")
    return problems


async def settle(kube: Kube, world: World, pod: str, timeout: float = 20.0) -> None:
    """Until the pod just deleted is gone (a pod with claims lingers a moment, terminating,
    and counts on its node until then, for both schedulers) and the claims of deleted pods
    are too (the controller deletes them): the next copy must see the devices and room the
    last one held as free."""
    deadline = time.monotonic() + timeout
    path = f"/api/v1/namespaces/{world.ns}/pods/{pod}"
    while time.monotonic() < deadline:
        try:
            await kube.get(path)
        except KubeError as exc:
            if exc.status == 404:
                break
            raise
        await asyncio.sleep(0.05)
    keep = {c["metadata"]["name"] for c in world.allocated}
    while time.monotonic() < deadline:
        claims = await kube.list(f"{RESOURCE}/namespaces/{world.ns}/resourceclaims")
        if all(c["metadata"]["name"] in keep for c in claims):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"claims of deleted pods still there after {timeout}s")


async def reset(kube: Kube, namespaces: tuple[str, ...]) -> None:
    for ns in namespaces:
        for kind in ("resourceclaims", "resourceclaimtemplates"):
            for obj in await kube.list(f"{RESOURCE}/namespaces/{ns}/{kind}"):
                path = f"{RESOURCE}/namespaces/{ns}/{kind}/{obj['metadata']['name']}"
                with contextlib.suppress(KubeError):
                    if obj["metadata"].get("finalizers"):
                        await kube.merge_patch(path, {"metadata": {"finalizers": None}})
                    await kube.delete(path)
    for kind in ("resourceslices", "deviceclasses"):
        for obj in await kube.list(f"{RESOURCE}/{kind}"):
            with contextlib.suppress(KubeError):
                await kube.delete(f"{RESOURCE}/{kind}/{obj['metadata']['name']}")
