"""bench/throughput's workloads, after kube-scheduler's scheduler_perf (SchedulingBasic,
TopologySpreading, SchedulingPodAntiAffinity, SchedulingPodAffinity, SchedulingNodeAffinity,
MixedSchedulingBasePod): pure builders for the nodes' labels and the pods, and a check that a
runner's placements honour the required constraints.

The pod builders start from `manifests.pod` (100m/128Mi) and add one constraint each, so the
workloads differ only in what the schedulers must evaluate. `basic` is today's pod, unchanged,
on today's unlabelled nodes: its figures stay comparable with the earlier runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from . import manifests

WORKLOADS = (
    "basic",
    "spread",
    "preferred-spread",
    "anti-affinity",
    "affinity",
    "preferred-affinity",
    "node-affinity",
    "mixed",
    "volumes",
    "gangs",
    "devices",
)
ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
# A label only some nodes carry, as SchedulingNodeAffinity's zone1/zone2 (its nodes all sit in
# one zone): ours have zones of their own, so node affinity gets a label of its own.
POOL_KEY = "bench.loadwise.io/pool"
APP_KEY = "app"
ZONES = 10
POOLS = 5
AFFINE_POOLS = ("pool-0", "pool-1")  # 2 of 5 pools: 40% of the nodes
# Anchors (the pods `affinity` must join) in 3 of the 10 zones, so the filter removes most nodes.
ANCHOR_ZONES = 3
ANCHOR_NAMESPACE = "default"  # with the existing pods, which no runner deletes
ANCHOR_APP = "anchor"
# `mixed`, by pod index: 4 plain pods in 10, one of each constrained kind, interleaved.
MIX = (
    "basic",
    "spread",
    "basic",
    "anti-affinity",
    "node-affinity",
    "basic",
    "affinity",
    "preferred-spread",
    "basic",
    "preferred-affinity",
)
REQUIRED = ("spread", "anti-affinity", "affinity", "node-affinity")
# `volumes`: a StatefulSet's pods, each with a WaitForFirstConsumer claim of its own, against
# local PVs made in advance (one per pod, round-robin over the nodes), as scheduler_perf's
# SchedulingWithPVC-like workloads; the schedulers bind the PVs (PreBind) before the pods.
VOLUME_CLASS = "bench-local"
# `gangs`: groups of GANG pods, each a Kubernetes PodGroup (scheduling.k8s.io/v1beta1) with
# minCount GANG, made before the pods (as a Spark or training job's operator makes it): both
# schedulers bind a group's pods all or none.
GANG = 10
# `devices`: every pod asks for one GPU through a ResourceClaimTemplate (dynamic resource
# allocation); every node publishes a ResourceSlice of DEVICES GPUs (as a DRA driver would, by
# hand: KWOK runs no kubelet plugin). kube-controller-manager makes each pod's claim; both
# schedulers allocate and write it (PreBind) before the pod is bound.
DEVICES = 8
DEVICE_DRIVER = "gpu.bench.loadwise.io"
DEVICE_CLASS = "bench-gpu"
DEVICE_TEMPLATE = "one-gpu"


def zone(i: int) -> str:
    """Node i's zone: round-robin as scheduler_perf's labelNodePrepareStrategy, shifted by one
    every 10 nodes. bench/throughput sets node i's background CPU by i % 10: plain round-robin
    would make zone-0 the coolest zone and zone-9 the hottest, and load-aware scoring would then
    fight every zone spread. Shifted, each zone holds every load level equally (per 100 nodes)."""
    return f"zone-{(i + i // 10) % ZONES}"


def pool(i: int) -> str:
    """Node i's pool, likewise independent of its load level and of its zone (per 50 nodes)."""
    return f"pool-{(i // 10 + 2 * i) % POOLS}"


def node_labels(workload: str, i: int) -> dict[str, str]:
    """Extra labels of node i: none for `basic` (today's nodes), else zone and pool."""
    if workload == "basic":
        return {}
    return {ZONE_KEY: zone(i), POOL_KEY: pool(i)}


def kind(workload: str, i: int) -> str:
    """The workload pod i follows: itself, or its slot in MIX for `mixed`."""
    return MIX[i % len(MIX)] if workload == "mixed" else workload


def count(workload: str, pods: int, of: str) -> int:
    """How many of the first `pods` pods are of kind `of`."""
    return sum(1 for i in range(pods) if kind(workload, i) == of)


def refusal(workload: str, nodes: int, pods: int) -> str | None:
    """Why this size cannot be bound completely, or None. Anti-affinity by hostname puts each
    of its pods on a node of its own, so there must be no more of them than nodes."""
    if workload not in WORKLOADS:
        return f"unknown workload {workload!r}: one of {', '.join(WORKLOADS)}"
    if workload == "gangs" and pods % GANG:
        return f"--workload gangs places groups of {GANG} pods: --pods must be a multiple of it"
    spread_out = count(workload, pods, "anti-affinity")
    if spread_out > nodes:
        return (
            f"--workload {workload} has {spread_out} anti-affinity pods for {nodes} nodes: each "
            f"needs a node of its own (required podAntiAffinity on {HOST_KEY}), so they would "
            "not all bind; use more nodes or fewer pods"
        )
    return None


def _selector(app: str) -> dict[str, Any]:
    return {"matchLabels": {APP_KEY: app}}


def _anchor_term() -> dict[str, Any]:
    return {
        "labelSelector": _selector(ANCHOR_APP),
        "topologyKey": ZONE_KEY,
        "namespaces": [ANCHOR_NAMESPACE],
    }


def pod(workload: str, i: int, name: str, namespace: str, scheduler: str) -> dict[str, Any]:
    """Pod i of the workload, for `scheduler`."""
    shape = kind(workload, i)
    if shape in ("basic", "gangs", "volumes", "devices"):  # the pod bench/throughput created
        body = manifests.pod(
            name, namespace=namespace, scheduler_name=scheduler, cpu="100m", memory="128Mi"
        )
    if shape == "basic":
        return body
    if shape == "gangs":
        return manifests.in_group(body, gang_name(i, name))
    if shape == "devices":
        body["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimTemplateName": DEVICE_TEMPLATE}
        ]
        body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        return body
    if shape == "volumes":
        body["spec"]["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim_name(name)}}
        ]
        return body
    body = manifests.pod(
        name,
        namespace=namespace,
        scheduler_name=scheduler,
        cpu="100m",
        memory="128Mi",
        labels={APP_KEY: shape},
    )
    spec = body["spec"]
    if shape in ("spread", "preferred-spread"):
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_KEY,
                "whenUnsatisfiable": "DoNotSchedule" if shape == "spread" else "ScheduleAnyway",
                "labelSelector": _selector(shape),
            }
        ]
    elif shape == "anti-affinity":
        term = {"labelSelector": _selector(shape), "topologyKey": HOST_KEY}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    elif shape == "affinity":
        spec["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_anchor_term()]}
        }
    elif shape == "preferred-affinity":
        preferred = {"weight": 1 + i % 100, "podAffinityTerm": _anchor_term()}
        spec["affinity"] = {
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [preferred]}
        }
    elif shape == "node-affinity":
        match = {"key": POOL_KEY, "operator": "In", "values": list(AFFINE_POOLS)}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [match]}]
                }
            }
        }
    else:
        raise ValueError(f"unknown workload {shape!r}")
    return body


def gang_name(i: int, pod_name: str) -> str:
    """The PodGroup pod i belongs to, named after its runner's prefix (pods are `XX-00042`)."""
    return f"{pod_name.rsplit('-', 1)[0]}-g{i // GANG:04d}"


def gangs(names: Sequence[str], namespace: str) -> list[dict[str, Any]]:
    """The PodGroups of the `gangs` workload's pods `names` (in pod index order)."""
    groups = dict.fromkeys(gang_name(i, n) for i, n in enumerate(names))
    return [manifests.pod_group(g, namespace, GANG) for g in groups]


def claim_name(pod_name: str) -> str:
    return f"{pod_name}-data"


def storage_class() -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": VOLUME_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def volume(i: int, pod_name: str, node: str) -> dict[str, Any]:
    """Local PV i (named after the pod it is made for; any claim of the class may take it),
    on `node`."""
    match = {"key": HOST_KEY, "operator": "In", "values": [node]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pv-{pod_name}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": VOLUME_CLASS,
            "local": {"path": f"/mnt/{i}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [match]}]}},
        },
    }


def claim(pod_name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name(pod_name), "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": VOLUME_CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def device_class() -> dict[str, Any]:
    selector = {"cel": {"expression": f'device.driver == "{DEVICE_DRIVER}"'}}
    return {"metadata": {"name": DEVICE_CLASS}, "spec": {"selectors": [selector]}}


def device_slice(node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DEVICE_DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(DEVICES)
            ],
        },
    }


def device_template(namespace: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}
    return {
        "metadata": {"name": DEVICE_TEMPLATE, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def anchor_zones(nodes: int) -> list[str]:
    """The zones that get an anchor pod (those of them that have nodes)."""
    return [zone(k) for k in range(min(ANCHOR_ZONES, ZONES, nodes))]


def anchors(workload: str, nodes: Sequence[str]) -> list[dict[str, Any]]:
    """Already-bound anchor pods for the affinity workloads: one on the first node of each
    anchor zone, like scheduler_perf's init pods that SchedulingPodAffinity's pods join."""
    if workload not in ("affinity", "preferred-affinity", "mixed"):
        return []
    out = []
    for k, name in enumerate(anchor_zones(len(nodes))):
        body = manifests.pod(
            f"anchor-{name}",
            namespace=ANCHOR_NAMESPACE,
            scheduler_name="none",
            labels={APP_KEY: ANCHOR_APP},
        )
        body["spec"]["nodeName"] = nodes[k]  # node k < 10 is in zone k
        out.append(body)
    return out


def _skew(per_zone: Counter[str], zones: Sequence[str]) -> int:
    counts = [per_zone.get(z, 0) for z in zones]
    return max(counts) - min(counts) if counts else 0


def check(
    workload: str, placed: Mapping[int, str], labels: Mapping[str, Mapping[str, str]]
) -> dict[str, Any]:
    """What a runner's placements (pod index -> node) did with the constraints, given each
    node's labels. `violations` counts breaches of the required ones (0 for a correct
    scheduler; the ceiling binds round-robin and ignores them); the preferred ones are
    reported, not judged."""
    zones = sorted({z for node in labels.values() if (z := node.get(ZONE_KEY))})
    anchored = set(anchor_zones(len(labels)))
    by_kind: dict[str, list[str]] = {}
    for i, node in placed.items():
        by_kind.setdefault(kind(workload, i), []).append(node)
    out: dict[str, Any] = {}
    violations = 0
    for shape, where in sorted(by_kind.items()):
        if shape in ("spread", "preferred-spread"):
            skew = _skew(Counter(labels[n].get(ZONE_KEY, "") for n in where), zones)
            out[f"{shape}_skew"] = skew
            if shape == "spread":
                violations += max(0, skew - 1)
        elif shape == "anti-affinity":
            shared = len(where) - len(set(where))
            out["anti_affinity_shared_nodes"] = shared
            violations += shared
        elif shape in ("affinity", "preferred-affinity"):
            inside = sum(1 for n in where if labels[n].get(ZONE_KEY) in anchored)
            out[f"{shape.replace('-', '_')}_in_anchor_zones"] = round(inside / len(where), 3)
            if shape == "affinity":
                violations += len(where) - inside
        elif shape == "node-affinity":
            outside = sum(1 for n in where if labels[n].get(POOL_KEY) not in AFFINE_POOLS)
            out["node_affinity_outside_pools"] = outside
            violations += outside
        elif shape == "gangs":  # a group with some but not all of its pods bound
            members = Counter(i // GANG for i in placed)
            partial = sum(1 for bound in members.values() if bound < GANG)
            out["gangs_partly_bound"] = partial
            violations += partial
    out["violations"] = violations
    return out
