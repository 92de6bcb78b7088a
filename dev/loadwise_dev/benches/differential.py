"""Differential testing against the real kube-scheduler: is loadwise's choice feasible?

For each generated pod, on one control plane where loadwise and kube-scheduler both run:
1. a copy for loadwise is created; it ends bound to node X or refused (PodScheduled=False);
   it is then deleted so every pod sees the same cluster;
2. a copy for kube-scheduler (the oracle) is created: pinned to X by required node affinity
   (`matchFields metadata.name In [X]`, ANDed into every term) when loadwise placed it, unpinned
   when loadwise refused it;
3. agreement: loadwise placed it and kube-scheduler binds the pinned copy, or loadwise refused it
   and kube-scheduler cannot place the unpinned copy either.
The pin is node affinity, which PodTopologySpread's default `nodeAffinityPolicy: Honor` would
fold into its domain counting; generated pods with spread constraints therefore carry no node
affinity of their own, and their pinned oracle copy uses `nodeAffinityPolicy: Ignore`, which for
such pods counts exactly the domains Honor would have.

Some placed and incoming pods are selected by Services and owned by ReplicaSets, so both
schedulers apply their system default spread constraints to them (ScheduleAnyway: they change
scores, never feasibility, which is what is compared). Each ReplicaSet is held in deletion by a
finalizer, so its controller neither deletes nor adopts pods: they keep the owner they are given.
These choices, and the empty label selectors some spread constraints get, come from their own
random stream, so a seed's clusters and pods are otherwise the same as before they were added.

Resource accounting of Kubernetes 1.34-1.37, each on a stream of its own too: pod-level requests
(KEP-2837), in-place resizes in flight on placed pods (KEP-1287), and nominations set by another
component (KEP-5278). For the last, some scenarios hold a gated pod per scheduler (one named
for loadwise, one for kube-scheduler: each scheduler's nominator tracks its own pods only) with
`status.nominatedNodeName` set, which both must leave room for; and some incoming pods carry a
nomination of their own (created gated, nominated, then released). A scheduler places such a
pod on its nominated node whenever it fits there, so when loadwise places it elsewhere the oracle
is asked twice: pinned to the nominated node it must refuse, pinned to loadwise's node it must
bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import manifests
from ..engines import differential_devices as devices
from ..engines import differential_volumes as volumes
from ..kube import Kube, KubeError

NS, NS_B = "diff", "diff-b"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
TAINTS = [
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
    {"key": "maintenance", "value": "", "effect": "NoExecute"},
    {"key": "team", "value": "x", "effect": "NoSchedule"},
]
HOLD = "loadwise.io/differential-hold"  # a finalizer: keeps a ReplicaSet in deletion, inert
WORKLOAD_STREAM = 0x5EED  # the Services' and owners' random stream, apart from the scenarios'
RESOURCE_STREAM = 0x2837  # pod-level resources (KEP-2837): a stream of their own, so the
# scenarios of a seed stay what they were before the generator made them
RESIZE_STREAM = 0x1287  # in-place resizes of placed pods (KEP-1287), likewise
NOMINATION_STREAM = 0x5278  # nominations set by another component (KEP-5278), likewise
VOLUME_SHARE = 0.5  # scenarios with storage (differential_volumes.py), and pods with volumes
GATE = "loadwise.io/differential-gate"  # holds a pod while its nomination is written
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
    {"key": "team", "operator": "Equal", "value": "y"},
    {"operator": "Exists"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


# --- generation -------------------------------------------------------------------------------
def gen_nodes(rng: random.Random, prefix: str) -> list[dict[str, Any]]:
    nodes = []
    for i in range(rng.randint(5, 8)):
        labels = {"disk": rng.choice(["ssd", "hdd"]), "cores": rng.choice(["2", "4", "8", "16"])}
        if rng.random() < 0.9:
            labels[ZONE] = rng.choice("abc")
        extra = {"nvidia.com/gpu": str(rng.randint(1, 4))} if rng.random() < 0.25 else None
        node = manifests.node(
            f"{prefix}-n{i}",
            cpu=str(rng.choice([2, 4, 8])),
            memory=f"{rng.choice([4, 8, 16, 32])}Gi",
            pods=rng.randint(6, 30),
            labels=labels,
            unschedulable=rng.random() < 0.1,
            extra=extra,
        )
        if rng.random() < 0.3:
            node["spec"]["taints"] = [copy.deepcopy(rng.choice(TAINTS))]
        nodes.append(node)
    return nodes


def _labels(rng: random.Random) -> dict[str, str]:
    return {"app": rng.choice(["web", "db", "cache"]), "tenant": rng.choice(["t1", "t2"])}


def _term(rng: random.Random, namespaced: bool = True) -> dict[str, Any]:
    term: dict[str, Any] = {
        "labelSelector": {"matchLabels": {"app": rng.choice(["web", "db", "cache"])}},
        "topologyKey": rng.choice([ZONE, HOST]),
    }
    if namespaced and rng.random() < 0.3:
        if rng.random() < 0.5:
            term["namespaces"] = [NS_B]
        else:
            term["namespaceSelector"] = {"matchLabels": {"team": "b"}}
    return term


def gen_existing(rng: random.Random, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods already placed (spec.nodeName set at creation), within each node's capacity."""
    pods = []
    for i in range(rng.randint(6, 18)):
        node = rng.choice(nodes)
        ns = NS if rng.random() < 0.8 else NS_B
        pod = manifests.pod(
            f"existing-{i}",
            namespace=ns,
            scheduler_name="default-scheduler",
            cpu=f"{rng.choice([100, 200, 300])}m",
            memory=f"{rng.choice([64, 128, 256])}Mi",
            labels=_labels(rng),
        )
        pod["spec"]["nodeName"] = node["metadata"]["name"]
        if rng.random() < 0.15:
            pod["spec"]["containers"][0]["ports"] = [
                {"containerPort": 80, "hostPort": rng.choice([80, 443]), "protocol": "TCP"}
            ]
        if rng.random() < 0.15:
            pod["spec"]["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(rng)]}
            }
        pods.append(pod)
    return pods


def _node_expression(rng: random.Random) -> dict[str, Any]:
    key, values = rng.choice(
        [("disk", ["ssd", "hdd"]), ("cores", ["2", "4", "8", "16"]), (ZONE, ["a", "b", "c"])]
    )
    operator = rng.choice(
        ["In", "NotIn", "Exists", "DoesNotExist"] + (["Gt", "Lt"] if key == "cores" else [])
    )
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if operator in ("In", "NotIn"):
        expression["values"] = rng.sample(values, rng.randint(1, 2))
    elif operator in ("Gt", "Lt"):
        expression["values"] = [rng.choice(values)]
    return expression


def gen_pod(rng: random.Random, name: str) -> dict[str, Any]:
    pod = manifests.pod(
        name,
        namespace=NS,
        cpu=f"{rng.choice([50, 100, 250, 500, 1000, 2000, 3500])}m",
        memory=f"{rng.choice([64, 256, 1024, 4096, 12288])}Mi",
        labels=_labels(rng),
    )
    spec = pod["spec"]
    container = spec["containers"][0]
    if rng.random() < 0.05:
        container["resources"]["requests"]["nvidia.com/gpu"] = str(rng.randint(1, 2))
        container["resources"]["limits"] = {
            "nvidia.com/gpu": container["resources"]["requests"]["nvidia.com/gpu"]
        }
    affinity: dict[str, Any] = {}
    spread = rng.random() < 0.2
    if spread:
        constraint: dict[str, Any] = {
            "maxSkew": rng.randint(1, 2),
            "topologyKey": rng.choice([ZONE, HOST]),
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": pod["metadata"]["labels"]["app"]}},
        }
        if rng.random() < 0.3:
            constraint["minDomains"] = rng.randint(2, 4)
        if rng.random() < 0.3:
            constraint["nodeTaintsPolicy"] = "Honor"
        spec["topologySpreadConstraints"] = [constraint]
    else:  # node affinity only without spread (see the module docstring)
        if rng.random() < 0.2:
            spec["nodeSelector"] = {"disk": rng.choice(["ssd", "hdd"])}
        if rng.random() < 0.25:
            terms = [
                {"matchExpressions": [_node_expression(rng) for _ in range(rng.randint(1, 2))]}
                for _ in range(rng.randint(1, 2))
            ]
            affinity["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
    if rng.random() < 0.35:
        spec["tolerations"] = rng.sample(TOLERATIONS, rng.randint(1, 2))
    if rng.random() < 0.1:
        container["ports"] = [
            {"containerPort": 80, "hostPort": rng.choice([80, 443, 8080]), "protocol": "TCP"}
        ]
    if rng.random() < 0.12:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(rng)]}
    if rng.random() < 0.15:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term(rng)]
        }
    if affinity:
        spec["affinity"] = affinity
    return pod


def vary_resources(rng: random.Random, pod: dict[str, Any], share: float = 0.25) -> dict[str, Any]:
    """With probability `share`, move some of the pod's requests to the pod level
    (`spec.resources.requests`, KEP-2837): its cpu, its memory or both, at the same or a
    larger amount, with the container keeping none, part or all of its own, and sometimes a
    second container without requests. Both schedulers must count it the same way."""
    if rng.random() >= share:
        return pod
    spec = pod["spec"]
    container = spec["containers"][0]
    requests = container.setdefault("resources", {}).setdefault("requests", {})
    pod_level: dict[str, str] = {}
    for name in rng.choice([("cpu",), ("memory",), ("cpu", "memory")]):
        amount = requests.get(name)
        if amount is None:
            continue
        pod_level[name] = amount if rng.random() < 0.6 else _doubled(amount)
        if rng.random() < 0.5:
            del requests[name]  # the container keeps none of it
    if not pod_level:
        return pod
    spec["resources"] = {"requests": pod_level}
    if rng.random() < 0.3:
        spec["containers"].append({"name": "helper", "image": container["image"]})
    return pod


def resize_status(
    rng: random.Random, pod: dict[str, Any], share: float = 0.25
) -> dict[str, Any] | None:
    """With probability `share`, the status a kubelet writes while an in-place resize of this
    placed pod is in flight (KEP-1287): its container's allocated cpu grown or shrunk, actuated
    or not yet, sometimes infeasible; for a pod with pod-level requests, sometimes the pod-level
    status sums too. Both schedulers must count the pod alike."""
    if rng.random() >= share:
        return None
    container = pod["spec"]["containers"][0]
    spec_cpu = (container.get("resources") or {}).get("requests", {}).get("cpu") or "100m"
    millis = int("".join(ch for ch in spec_cpu if ch.isdigit())) * (
        1 if spec_cpu.endswith("m") else 1000
    )
    allocated = f"{max(1, int(millis * rng.choice([0.5, 2, 3])))}m"
    actual = rng.choice([spec_cpu, allocated])
    cs: dict[str, Any] = {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2026-11-25T00:00:00Z"}},
        "allocatedResources": {"cpu": allocated},
        "resources": {"requests": {"cpu": actual}},
    }
    status: dict[str, Any] = {"phase": "Running", "containerStatuses": [cs]}
    if rng.random() < 0.2:
        status["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
        ]
    if "resources" in pod["spec"] and rng.random() < 0.5:
        status["allocatedResources"] = {"cpu": allocated}
        status["resources"] = {"requests": {"cpu": actual}}
    return {"status": status}


def gen_held(rng: random.Random, nodes: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """A pending pod another component nominated to a node (KEP-5278), kept gated: both
    schedulers must leave its room free there for pods of no higher priority."""
    pod = manifests.pod(
        "held",
        namespace=NS,
        cpu=f"{rng.choice([500, 1000, 2000, 3000])}m",
        memory=f"{rng.choice([256, 1024, 4096])}Mi",
        labels=_labels(rng),
    )
    return pod, str(rng.choice(nodes)["metadata"]["name"])


async def create_nominated(
    kube: Kube, body: dict[str, Any], node: str, release: bool = True
) -> None:
    """Create a pod whose `status.nominatedNodeName` is `node` before its scheduler sees it
    schedulable: created gated, nominated, then (with `release`) its gate removed."""
    gated = copy.deepcopy(body)
    gated["spec"]["schedulingGates"] = [{"name": GATE}]
    ns, name = gated["metadata"]["namespace"], gated["metadata"]["name"]
    await kube.create(f"/api/v1/namespaces/{ns}/pods", gated)
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    await kube.merge_patch(f"{path}/status", {"status": {"nominatedNodeName": node}})
    if release:
        await kube.merge_patch(path, {"spec": {"schedulingGates": None}})


async def decide(
    kube: Kube,
    body: dict[str, Any],
    nominated: str | None,
    inspect: Any = None,
    world: devices.World | None = None,
) -> str | None:
    """Create `body` (nominated to `nominated`, if given), read its outcome, delete it.
    `inspect(pod, node)`: awaited with the bound pod before it is deleted. With a device
    `world`, waits afterwards until its claims are gone (their devices free again)."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if nominated is None:
        await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
    else:
        await create_nominated(kube, body, nominated)
    try:
        node = await outcome(kube, ns, name)
        if inspect is not None and node not in (None, VANISHED):
            await inspect(await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}"), node)
        return node
    finally:
        await kube.delete_pod_now(ns, name)
        if world is not None and (body["spec"].get("resourceClaims") or _asks_extended(body)):
            await devices.settle(kube, world, name)


def _doubled(amount: str) -> str:
    number = "".join(c for c in amount if c.isdigit())
    return f"{int(number) * 2}{amount[len(number) :]}"


def gen_workloads(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Services and ReplicaSets selecting some of the generated pods (by `app`, or `tenant`)."""
    services, replicasets = [], []
    for ns in (NS, NS_B):
        for app in ("web", "db", "cache"):
            if rng.random() < 0.5:
                services.append(_service(f"svc-{app}", ns, {"app": app}))
            if rng.random() < 0.7:
                selector: dict[str, Any] = {"matchLabels": {"app": app}}
                if rng.random() < 0.5:
                    selector = {
                        "matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]
                    }
                replicasets.append(_replicaset(f"rs-{app}", ns, app, selector))
        if rng.random() < 0.3:
            tenant = rng.choice(["t1", "t2"])
            services.append(_service(f"svc-{tenant}", ns, {"tenant": tenant}))
    return services, replicasets


def _service(name: str, ns: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": selector, "ports": [{"port": 80}]},
    }


def _replicaset(name: str, ns: str, app: str, selector: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns, "finalizers": [HOLD]},
        "spec": {
            "replicas": 0,
            "selector": selector,
            "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [container]}},
        },
    }


def own(rng: random.Random, pod: dict[str, Any], replicasets: list[dict[str, Any]]) -> None:
    """Make about half the pods that a generated ReplicaSet selects its pods (the uid is filled
    in when the ReplicaSet exists)."""
    meta = pod["metadata"]
    name = f"rs-{meta['labels']['app']}"
    held = any(
        rs["metadata"]["name"] == name and rs["metadata"]["namespace"] == meta["namespace"]
        for rs in replicasets
    )
    if held and rng.random() < 0.5:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": name,
                "uid": "",
                "controller": True,
            }
        ]


async def create_workloads(
    kube: Kube, services: list[dict[str, Any]], replicasets: list[dict[str, Any]]
) -> dict[tuple[str, str], str]:
    """Create them; each ReplicaSet is then deleted, and stays, held by its finalizer. Returns
    the ReplicaSets' uids by (namespace, name)."""
    for svc in services:
        await kube.create(f"/api/v1/namespaces/{svc['metadata']['namespace']}/services", svc)
    uids = {}
    for rs in replicasets:
        ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
        created = await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", rs)
        await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}")
        uids[(ns, name)] = created["metadata"]["uid"]
    return uids


def owned_by(pod: dict[str, Any], uids: dict[tuple[str, str], str]) -> dict[str, Any]:
    for ref in pod["metadata"].get("ownerReferences") or ():
        ref["uid"] = uids[(pod["metadata"]["namespace"], ref["name"])]
    return pod


def pin(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The oracle copy, restricted to `node` (see the module docstring)."""
    pinned = copy.deepcopy(pod)
    spec = pinned["spec"]
    field_pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]}
    )
    for term in required["nodeSelectorTerms"]:
        term.setdefault("matchFields", []).append(field_pin)
    for constraint in spec.get("topologySpreadConstraints") or ():
        constraint["nodeAffinityPolicy"] = "Ignore"
    return pinned


# --- running ----------------------------------------------------------------------------------
@dataclass
class Report:
    pods: int = 0
    agree: int = 0
    placed: int = 0
    refused: int = 0
    owned: int = 0  # pods with system default spread constraints (owned by a ReplicaSet)
    pod_level: int = 0  # pods with pod-level requests (KEP-2837)
    resized: int = 0  # placed pods with an in-place resize in flight (KEP-1287)
    held: int = 0  # scenarios with a pod nominated by another component, held (KEP-5278)
    nominated: int = 0  # incoming pods nominated by another component (KEP-5278)
    nominated_elsewhere: int = 0  # ... that loadwise placed on another node (it did not fit)
    volume_scenarios: int = 0  # scenarios with storage (differential_volumes.py)
    with_volumes: int = 0  # incoming pods with claims or ephemeral volumes
    volumes_placed: int = 0  # ... that loadwise placed (their claims bound)
    in_tree: int = 0  # ... mounting the bound in-tree EBS disk (migrated to CSI on some nodes)
    device_scenarios: int = 0  # scenarios with devices (differential_devices.py)
    with_devices: int = 0  # incoming pods with resource claims
    devices_placed: int = 0  # ... that loadwise placed (their claims allocated)
    with_extended: int = 0  # incoming pods asking extended resources a DeviceClass backs
    extended_placed: int = 0  # ... that loadwise placed
    allocation_problems: int = 0  # ... whose allocation the independent check refused
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def agreement(self) -> float:
        return self.agree / self.pods if self.pods else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "agree": self.agree,
            "agreement": round(self.agreement, 4),
            "loadwise_placed": self.placed,
            "loadwise_refused": self.refused,
            "owned_by_replicasets": self.owned,
            "pod_level_requests": self.pod_level,
            "placed_pods_resizing": self.resized,
            "scenarios_holding_a_nominated_pod": self.held,
            "pods_nominated_by_another_component": self.nominated,
            "nominated_pods_placed_elsewhere": self.nominated_elsewhere,
            "volume_scenarios": self.volume_scenarios,
            "pods_with_volumes": self.with_volumes,
            "pods_with_volumes_placed": self.volumes_placed,
            "pods_with_an_in_tree_disk": self.in_tree,
            "device_scenarios": self.device_scenarios,
            "pods_with_devices": self.with_devices,
            "pods_with_devices_placed": self.devices_placed,
            "pods_with_dra_extended_resources": self.with_extended,
            "pods_with_dra_extended_resources_placed": self.extended_placed,
            "allocations_refused_by_the_check": self.allocation_problems,
            "seconds": round(self.seconds, 1),
            "disagreements": self.disagreements,
        }


VANISHED = "(deleted before its outcome was read)"
REFUSALS: dict[str, str] = {}  # pod name -> why its scheduler refused it (disagreements show it)


async def outcome(kube: Kube, ns: str, name: str, timeout: float = 20.0) -> str | None:
    """The node a pod got, or None once its scheduler marked it Unschedulable. VANISHED when the
    pod is gone: a pod bound to a node with an untolerated NoExecute taint is evicted at once."""
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pod = await kube.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return VANISHED
            raise
        if pod["spec"].get("nodeName"):
            return str(pod["spec"]["nodeName"])
        if manifests.marked_unschedulable(pod) and not _waits_for_ephemeral_claim(pod):
            REFUSALS[name] = next(
                (str(c.get("message")) for c in pod["status"]["conditions"]
                 if c.get("type") == "PodScheduled"),
                "",
            )  # fmt: skip
            return None
        await asyncio.sleep(0.02)
    conditions = (pod.get("status") or {}).get("conditions")
    raise TimeoutError(
        f"{ns}/{name} neither bound nor marked Unschedulable in {timeout}s: conditions "
        f"{conditions}, claims {pod['spec'].get('resourceClaims')}, "
        f"claim statuses {(pod.get('status') or {}).get('resourceClaimStatuses')}"
    )


def _waits_for_ephemeral_claim(pod: dict[str, Any]) -> bool:
    """Refused only until the ephemeral-volume controller makes the pod's claim (both
    schedulers say so at first, and place it once the claim exists): no verdict yet. A verdict
    read then, and the pod deleted, raced the scheduler's next attempt, whose PreBind could
    bind a volume of one world and not of its twin. Likewise refused only until the idle
    ResourceClaim its PostFilter deallocated is seen deallocated: the next attempt decides."""
    return any(
        c.get("type") == "PodScheduled"
        and (
            "waiting for ephemeral volume controller" in str(c.get("message"))
            or "deallocation of ResourceClaim completed" in str(c.get("message"))
        )
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


async def reset(kube: Kube) -> None:
    """No nodes, no pods, Services or ReplicaSets in the differential namespaces; namespaces
    exist with their labels."""
    for ns, labels in ((NS, {"team": "a"}), (NS_B, {"team": "b"})):
        await kube.delete_all_pods(ns)
        for rs in await kube.list(f"/apis/apps/v1/namespaces/{ns}/replicasets"):
            path = f"/apis/apps/v1/namespaces/{ns}/replicasets/{rs['metadata']['name']}"
            with contextlib.suppress(KubeError):
                await kube.merge_patch(path, {"metadata": {"finalizers": None}})
                await kube.delete(path)
        for svc in await kube.list(f"/api/v1/namespaces/{ns}/services"):
            with contextlib.suppress(KubeError):
                await kube.delete(f"/api/v1/namespaces/{ns}/services/{svc['metadata']['name']}")
        with contextlib.suppress(KubeError):
            await kube.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
    await volumes.reset(kube, (NS, NS_B))
    await devices.reset(kube, (NS, NS_B))
    for node in await kube.list("/api/v1/nodes"):
        await kube.delete(f"/api/v1/nodes/{node['metadata']['name']}")


async def run(
    kube: Kube,
    seed: int,
    scenarios: int,
    pods_per_scenario: int,
    scheduler_name: str = "loadwise-scheduler",
    wait_namespace: Any = None,
) -> Report:
    rng = random.Random(seed)
    workload_rng = random.Random(seed ^ WORKLOAD_STREAM)
    resource_rng = random.Random(seed ^ RESOURCE_STREAM)
    resize_rng = random.Random(seed ^ RESIZE_STREAM)
    nomination_rng = random.Random(seed ^ NOMINATION_STREAM)
    volume_rng = random.Random(seed ^ volumes.VOLUME_STREAM)
    device_rng = random.Random(seed ^ devices.DEVICE_STREAM)
    extended_rng = random.Random(seed ^ devices.EXTENDED_STREAM)
    report = Report()
    started = time.monotonic()
    async with volumes.Provisioner(kube, (NS,)):
        for s in range(scenarios):
            streams = (
                rng, workload_rng, resource_rng, resize_rng, nomination_rng, volume_rng,
                device_rng, extended_rng,
            )  # fmt: skip
            await _scenario(
                kube, s, pods_per_scenario, scheduler_name, wait_namespace, report, streams
            )
    report.seconds = time.monotonic() - started
    await reset(kube)
    return report


async def _scenario(
    kube: Kube,
    s: int,
    pods_per_scenario: int,
    scheduler_name: str,
    wait_namespace: Any,
    report: Report,
    streams: tuple[random.Random, ...],
) -> None:
    rng, workload_rng, resource_rng, resize_rng, nomination_rng, volume_rng = streams[:6]
    device_rng, extended_rng = streams[6:]
    await reset(kube)
    if wait_namespace is not None:
        await wait_namespace(NS)
        await wait_namespace(NS_B)
    nodes = gen_nodes(rng, f"s{s}")
    for node in nodes:
        await kube.create("/api/v1/nodes", node)
    services, replicasets = gen_workloads(workload_rng)
    uids = await create_workloads(kube, services, replicasets)
    for pod in gen_existing(rng, nodes):
        vary_resources(resource_rng, pod)
        own(workload_rng, pod, replicasets)
        path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
        await kube.create(path, owned_by(pod, uids))
        resize = resize_status(resize_rng, pod)
        if resize is not None:
            await kube.merge_patch(f"{path}/{pod['metadata']['name']}/status", resize)
            report.resized += 1
    held_by: dict[str, Any] | None = None  # the pod another component nominated, held
    if nomination_rng.random() < 0.4:
        held, held_node = gen_held(nomination_rng, nodes)
        held_by = {"node": held_node, "labels": held["metadata"]["labels"]}
        held_by["requests"] = held["spec"]["containers"][0]["resources"]["requests"]
        for name, scheduler in (("held-lw", scheduler_name), ("held-ks", "default-scheduler")):
            body = copy.deepcopy(held)
            body["metadata"]["name"], body["spec"]["schedulerName"] = name, scheduler
            await create_nominated(kube, body, held_node, release=False)
        report.held += 1
    world = None
    if volume_rng.random() < VOLUME_SHARE:
        world = volumes.gen_world(volume_rng, nodes, s, NS)
        await volumes.create_world(kube, world)
        report.volume_scenarios += 1
    device_world = None
    if device_rng.random() < devices.DEVICE_SHARE:
        device_world = devices.gen_world(device_rng, nodes, s, NS)
        await devices.create_world(kube, device_world)
        report.device_scenarios += 1
        for name, count in devices.plugin_nodes(extended_rng, device_world, nodes).items():
            listed = {f"example.com/a100-{s}": count}
            status = {"status": {"allocatable": listed, "capacity": listed}}
            await kube.merge_patch(f"/api/v1/nodes/{name}/status", status)
    await asyncio.sleep(0.5)  # both schedulers' watches catch up with the scenario
    for i in range(pods_per_scenario):
        template = vary_resources(resource_rng, gen_pod(rng, "x"))
        report.pod_level += "resources" in template["spec"]
        own(workload_rng, template, replicasets)
        owned_by(template, uids)
        for constraint in template["spec"].get("topologySpreadConstraints") or ():
            if workload_rng.random() < 0.15:  # selects everything, counts nothing
                constraint["labelSelector"] = {}
        nominated: str | None = None
        if nomination_rng.random() < 0.15:
            nominated = str(nomination_rng.choice(nodes)["metadata"]["name"])
            report.nominated += 1
        if world is not None and nominated is None and volume_rng.random() < VOLUME_SHARE:
            template["spec"]["volumes"], claims = volumes.gen_volumes(volume_rng, world, s, i)
            for side in volumes.SIDES:
                for body in claims:
                    await kube.create(
                        f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
                        volumes.sided(body, side),
                    )
            report.with_volumes += 1
            report.in_tree += volumes.mounts_in_tree_disk(template)
        wants_devices = device_rng.random() < devices.DEVICE_SHARE
        if (
            device_world is not None
            and wants_devices
            and nominated is None
            and "volumes" not in template["spec"]
        ):
            claims, claim_template = devices.gen_claims(device_rng, device_world, i)
            if claim_template is not None:
                await kube.create(
                    f"{devices.RESOURCE}/namespaces/{NS}/resourceclaimtemplates", claim_template
                )
            template["spec"]["resourceClaims"] = claims
            report.with_devices += 1
        if (
            device_world is not None
            and nominated is None
            and "volumes" not in template["spec"]
            and extended_rng.random() < devices.EXTENDED_SHARE
        ):
            devices.gen_extended(extended_rng, device_world, template)
            report.with_extended += 1
        ours = volumes.sided(template, "lw")
        ours["metadata"]["name"] = f"lw-{s}-{i}"
        ours["spec"]["schedulerName"] = scheduler_name
        problems: list[str] = []

        async def inspect(
            pod: dict[str, Any],
            node: str,
            world: Any = device_world,
            problems: list[str] = problems,
        ) -> None:
            if world is not None and (
                pod["spec"].get("resourceClaims")
                or pod["status"].get("extendedResourceClaimStatus")
            ):
                problems.extend(devices.check(world, pod, node, await devices.claims_of(kube, pod)))

        chosen = await decide(kube, ours, nominated, inspect, device_world)
        placed = chosen not in (None, VANISHED)
        report.devices_placed += placed and "resourceClaims" in ours["spec"]
        report.extended_placed += placed and _asks_extended(ours)
        report.allocation_problems += bool(problems)

        async def oracle(
            node: str | None,
            name: str,
            template: dict[str, Any] = template,
            nominated: str | None = nominated,
        ) -> str | None:
            body = volumes.sided(pin(template, node) if node else template, "ks")
            body["metadata"]["name"] = name
            body["spec"]["schedulerName"] = "default-scheduler"
            return await decide(kube, body, nominated, world=device_world)

        accepted: str | None = "(not asked)"
        agree = False
        if chosen != VANISHED:
            if nominated is not None and chosen not in (None, nominated):
                # It did not fit on its nominated node, by loadwise's judgement.
                report.nominated_elsewhere += 1
                there = await oracle(nominated, f"ks-{s}-{i}-nominated")
                accepted = await oracle(chosen, f"ks-{s}-{i}")
                agree = there is None and accepted not in (None, VANISHED)
                if there is not None:
                    accepted = f"{there} (its nominated node fits)"
            else:
                accepted = await oracle(chosen, f"ks-{s}-{i}")
                agree = accepted != VANISHED and (chosen is None) == (accepted is None)
        report.pods += 1
        report.owned += "ownerReferences" in template["metadata"]
        report.placed += chosen is not None
        report.volumes_placed += chosen is not None and "volumes" in template["spec"]
        report.refused += chosen is None
        if agree and not problems:
            report.agree += 1
        else:
            report.disagreements.append(
                {
                    "scenario": s,
                    "pod": i,
                    "loadwise": chosen,
                    "kube_scheduler": accepted,
                    "kube_scheduler_said": REFUSALS.get(f"ks-{s}-{i}"),
                    "loadwise_said": REFUSALS.get(f"lw-{s}-{i}"),
                    "nominated": nominated,
                    "held": held_by,
                    "spec": template["spec"],
                    "nodes": [_node_summary(n) for n in nodes],
                    "storage": _storage_summary(world),
                    "allocation_problems": problems,
                }
            )


def _asks_extended(pod: dict[str, Any]) -> bool:
    containers = [*(pod["spec"].get("initContainers") or ()), *pod["spec"]["containers"]]
    return any(
        name.startswith(("example.com/a100-", devices.IMPLICIT))
        for c in containers
        for name in (c.get("resources") or {}).get("requests") or {}
    )


def _storage_summary(world: volumes.World | None) -> dict[str, Any] | None:
    if world is None:
        return None
    return {
        "classes": world.classes,
        "volumes": [
            {"name": v["metadata"]["name"], "labels": v["metadata"]["labels"],
             "size": v["spec"]["capacity"]["storage"], "modes": v["spec"]["accessModes"],
             "affinity": v["spec"].get("nodeAffinity"), "claimRef": v["spec"].get("claimRef")}
            for v in world.volumes
        ],
        "claims": [c["metadata"]["name"] for c in world.claims],
        "csi_nodes": [c["metadata"]["name"] for c in world.csi_nodes],
    }  # fmt: skip


def _node_summary(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": node["metadata"]["name"],
        "labels": node["metadata"]["labels"],
        "taints": node["spec"].get("taints"),
        "unschedulable": node["spec"]["unschedulable"],
    }


async def _run_local(seed: int, scenarios: int, pods: int) -> Report:
    """A throw-away control plane with kube-scheduler and the operator, then `run`."""
    import logging

    from ..cluster import LocalCluster, running_operator

    logging.basicConfig(level=logging.WARNING)
    cluster = LocalCluster(prometheus=False).start()
    try:
        cluster.cp.start_scheduler(qps=1000, burst=1000)
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
                return await run(
                    kube,
                    seed,
                    scenarios,
                    pods,
                    wait_namespace=lambda ns: cluster.wait_namespace(kube, ns),
                )
    finally:
        cluster.stop()


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="loadwise vs kube-scheduler feasibility")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenarios", type=int, default=25)
    parser.add_argument("--pods", type=int, default=24, help="pods per scenario")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    report = asyncio.run(_run_local(args.seed, args.scenarios, args.pods))
    result = report.as_dict()
    print(
        f"differential vs kube-scheduler: {result['agree']}/{result['pods']} pods agree "
        f"({result['agreement']:.1%}); loadwise placed {result['loadwise_placed']}, refused "
        f"{result['loadwise_refused']}; {result['owned_by_replicasets']} owned by ReplicaSets; "
        f"{result['pod_level_requests']} with pod-level requests; "
        f"{result['placed_pods_resizing']} placed pods resizing; "
        f"{result['scenarios_holding_a_nominated_pod']} scenarios holding a pod nominated by "
        f"another component; {result['pods_nominated_by_another_component']} pods nominated by "
        f"another component ({result['nominated_pods_placed_elsewhere']} placed elsewhere); "
        f"{result['volume_scenarios']} scenarios with storage, {result['pods_with_volumes']} pods "
        f"with volumes ({result['pods_with_volumes_placed']} placed, "
        f"{result['pods_with_an_in_tree_disk']} with an in-tree disk); "
        f"{result['device_scenarios']} scenarios with devices, {result['pods_with_devices']} "
        f"pods with claims ({result['pods_with_devices_placed']} placed), "
        f"{result['pods_with_dra_extended_resources']} with extended resources a class backs "
        f"({result['pods_with_dra_extended_resources_placed']} placed), "
        f"{result['allocations_refused_by_the_check']} allocations refused by the check; "
        f"{result['seconds']}s; seed {args.seed}"
    )
    for d in report.disagreements:
        print(
            f"  disagreement: scenario {d['scenario']} pod {d['pod']}: "
            f"loadwise {d['loadwise']!r}, kube-scheduler {d['kube_scheduler']!r}"
        )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"seed": args.seed, **result}, indent=1))
    return 0 if not report.disagreements else 1


if __name__ == "__main__":
    raise SystemExit(main())
