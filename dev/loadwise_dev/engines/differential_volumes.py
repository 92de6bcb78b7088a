"""Volume scenarios for bench/differential: storage the incoming pods' claims meet, in two
mirrored worlds, one per scheduler.

Binding a claim changes the cluster (a PV taken), so loadwise's copy of a pod and
kube-scheduler's copy cannot share claims or volumes: every object here is made twice, with
`SIDE` in its names and classes replaced by `lw` or `ks` (`sided`), identical otherwise, on the
same nodes. A PV one scheduler's copy binds has its twin on the same node for the other's.

A scenario's world (`gen_world`, from a random stream of its own so the other scenarios stay as
they were): three classes per side (`SIDE-local`: WaitForFirstConsumer without a provisioner;
`SIDE-immediate`; `SIDE-dyn`: WaitForFirstConsumer provisioned by the bench itself, which plays a
CSI driver's provisioner, sometimes restricted to zones), local PVs of assorted sizes on some
nodes (hostname affinity, or zone affinity with zone labels), claims already bound to some of
them, a ReadWriteOncePod claim in use by a placed pod, an unbound Immediate claim, CSINode
attach limits on some nodes with placed pods holding CSI volumes there, and a bound in-tree EBS
disk that some CSINodes say is migrated to CSI. Each incoming pod may
get (`gen_volumes`) a new claim of either WaitForFirstConsumer class, a bound claim, the
ReadWriteOncePod claim, the Immediate claim, the in-tree disk's claim, a missing claim, or a
generic ephemeral volume.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from dataclasses import dataclass, field
from typing import Any

from .. import manifests
from ..kube import Kube, KubeError

VOLUME_STREAM = 0x7010
SIDES = ("lw", "ks")
DRIVER = "diff.example.com"  # the CSI driver whose provisioner the bench plays
PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
SIZES = ("1Gi", "2Gi", "5Gi", "10Gi")


def sided(obj: Any, side: str) -> Any:
    """A deep copy with every `SIDE` in its strings replaced by `side`."""
    if isinstance(obj, str):
        return obj.replace("SIDE", side)
    if isinstance(obj, dict):
        return {sided(k, side): sided(v, side) for k, v in obj.items()}
    if isinstance(obj, list):
        return [sided(v, side) for v in obj]
    return copy.deepcopy(obj)


def storage_classes(rng: random.Random) -> list[dict[str, Any]]:
    dyn: dict[str, Any] = {"metadata": {"name": "SIDE-dyn"}, "provisioner": DRIVER}
    if rng.random() < 0.5:
        dyn["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": rng.sample("abc", 2)}]}
        ]
    dyn["volumeBindingMode"] = "WaitForFirstConsumer"
    return [
        {
            "metadata": {"name": "SIDE-local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
        {
            "metadata": {"name": "SIDE-immediate"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        },
        dyn,
    ]


def pv(name: str, size: str, cls: str, affinity: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": spec.pop("labels", {})},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.pop("modes", ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": cls,
            "nodeAffinity": {"required": {"nodeSelectorTerms": [affinity]}},
            **spec,
        },
    }
    if "csi" not in body["spec"] and "awsElasticBlockStore" not in body["spec"]:
        body["spec"]["local"] = {"path": f"/mnt/{name}"}
    return body


def claim(name: str, ns: str, cls: str, size: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "accessModes": spec.pop("modes", ["ReadWriteOnce"]),
            "storageClassName": cls,
            "resources": {"requests": {"storage": size}},
            **spec,
        },
    }


def _on(node: dict[str, Any]) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {"matchExpressions": [{"key": HOST, "operator": "In", "values": [name]}]}


@dataclass
class World:
    """One scenario's storage, as templates (`SIDE` in names)."""

    ns: str
    classes: list[dict[str, Any]]
    volumes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    csi_nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)  # placed, using claims
    bound: list[str] = field(default_factory=list)  # claims bound before any pod comes
    read_write_once_pod: str = ""
    immediate: str = ""
    in_tree: str = ""  # the bound claim on an in-tree disk


def gen_world(rng: random.Random, nodes: list[dict[str, Any]], s: int, ns: str) -> World:
    world = World(ns, storage_classes(rng))
    for n, node in enumerate(nodes):
        for k in range(rng.choice([0, 0, 1, 2, 3])):
            name = f"SIDE-s{s}-n{n}-pv{k}"
            labels = {}
            affinity = _on(node)
            zone = node["metadata"]["labels"].get(ZONE)
            if zone and rng.random() < 0.2:  # a zonal volume: any node of the zone
                labels = {ZONE: zone}
                affinity = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
            modes = ["ReadWriteOncePod"] if rng.random() < 0.1 else ["ReadWriteOnce"]
            world.volumes.append(
                pv(name, rng.choice(SIZES), "SIDE-local", affinity, labels=labels, modes=modes)
            )
    for b in range(rng.randint(0, 2)):  # claims bound already (a StatefulSet's, say)
        node = rng.choice(nodes)
        name = f"SIDE-s{s}-bound{b}"
        volume = pv(f"{name}-pv", "5Gi", "SIDE-local", _on(node))
        if node["metadata"]["labels"].get(ZONE) and rng.random() < 0.5:
            volume["metadata"]["labels"] = {ZONE: node["metadata"]["labels"][ZONE]}
        volume["spec"]["claimRef"] = {"namespace": ns, "name": name}
        world.volumes.append(volume)
        world.claims.append(claim(name, ns, "SIDE-local", "1Gi", volumeName=f"{name}-pv"))
        world.bound.append(name)
    if rng.random() < 0.5:  # a ReadWriteOncePod claim a placed pod uses
        node = rng.choice(nodes)
        name = f"SIDE-s{s}-rwop"
        volume = pv(f"{name}-pv", "1Gi", "SIDE-local", _on(node), modes=["ReadWriteOncePod"])
        volume["spec"]["claimRef"] = {"namespace": ns, "name": name}
        world.volumes.append(volume)
        world.claims.append(
            claim(
                name, ns, "SIDE-local", "1Gi", volumeName=f"{name}-pv", modes=["ReadWriteOncePod"]
            )
        )
        world.pods.append(_user(f"SIDE-s{s}-rwop-user", ns, node, name))
        world.bound.append(name)
        world.read_write_once_pod = name
    if rng.random() < 0.3:
        world.immediate = f"SIDE-s{s}-immediate"
        world.claims.append(claim(world.immediate, ns, "SIDE-immediate", "100Gi"))
    for n, node in enumerate(nodes):  # CSI attach limits, and CSI volumes in use
        if rng.random() >= 0.4:
            continue
        count = rng.randint(1, 3)
        name = node["metadata"]["name"]
        driver = {"name": DRIVER, "nodeID": name, "allocatable": {"count": count}}
        world.csi_nodes.append(
            {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
             "spec": {"drivers": [driver]}}
        )  # fmt: skip
        for k in range(rng.randint(0, count)):
            claim_name = f"SIDE-s{s}-n{n}-csi{k}"
            volume = pv(
                f"{claim_name}-pv", "1Gi", "SIDE-dyn", _on(node),
                csi={"driver": DRIVER, "volumeHandle": f"SIDE-{claim_name}"},
            )  # fmt: skip
            volume["spec"]["claimRef"] = {"namespace": ns, "name": claim_name}
            world.volumes.append(volume)
            world.claims.append(
                claim(claim_name, ns, "SIDE-dyn", "1Gi", volumeName=volume["metadata"]["name"])
            )
            world.bound.append(claim_name)
            world.pods.append(_user(f"SIDE-s{s}-n{n}-csi{k}-user", ns, node, claim_name))
    _in_tree_disk(rng, world, nodes, s)
    return world


def _in_tree_disk(rng: random.Random, world: World, nodes: list[dict[str, Any]], s: int) -> None:
    """Sometimes a bound claim on an in-tree EBS disk of one zone (by node affinity or by its
    labels only), with some CSINodes saying the plugin is migrated: kube-scheduler then wants
    the CSI driver's zone key there, which no node here carries."""
    zones = sorted({z for n in nodes if (z := n["metadata"]["labels"].get(ZONE))})
    if not zones or rng.random() >= 0.5:
        return
    zone = rng.choice(zones)
    name = f"SIDE-s{s}-ebs"
    affinity = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
    ebs = {"volumeID": f"aws://{zone}/vol-SIDE{s}"}
    volume = pv(f"{name}-pv", "5Gi", "SIDE-local", affinity, awsElasticBlockStore=ebs)
    if rng.random() < 0.5:
        del volume["spec"]["nodeAffinity"]
        volume["metadata"]["labels"] = {ZONE: zone}
    volume["spec"]["claimRef"] = {"namespace": world.ns, "name": name}
    world.volumes.append(volume)
    world.claims.append(claim(name, world.ns, "SIDE-local", "1Gi", volumeName=f"{name}-pv"))
    world.bound.append(name)
    world.in_tree = name
    plugins = "storage.alpha.kubernetes.io/migrated-plugins"
    for body in world.csi_nodes:
        if rng.random() < 0.6:
            body["metadata"]["annotations"] = {plugins: "kubernetes.io/aws-ebs"}


def _user(name: str, ns: str, node: dict[str, Any], claim_name: str) -> dict[str, Any]:
    """A placed pod mounting a claim; requests almost nothing (its twin sits beside it)."""
    pod = manifests.pod(
        name, namespace=ns, scheduler_name="default-scheduler", cpu="1m", memory="1Mi"
    )
    pod["spec"]["nodeName"] = node["metadata"]["name"]
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return pod


async def create_classes(kube: Kube, world: World) -> None:
    """The classes, made anew (a class's topology cannot be updated)."""
    for cls in world.classes:
        for side in SIDES:
            body = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", **sided(cls, side)}
            with contextlib.suppress(KubeError):
                await kube.delete(f"{CLASSES}/{body['metadata']['name']}")
            await kube.create(CLASSES, body)


async def create_world(kube: Kube, world: World) -> None:
    """Both sides' objects; returns once the claims bound in advance are bound."""
    await create_classes(kube, world)
    for body in world.csi_nodes:
        await kube.create(CSINODES, body)
    for side in SIDES:
        for volume in world.volumes:
            await kube.create(PVS, sided(volume, side))
        for template in world.claims:
            body = sided(template, side)
            await kube.create(f"/api/v1/namespaces/{world.ns}/persistentvolumeclaims", body)
    for side in SIDES:
        for name in world.bound:
            await wait_bound(kube, world.ns, sided(name, side))
        for pod in world.pods:
            await kube.create(f"/api/v1/namespaces/{world.ns}/pods", sided(pod, side))


async def wait_bound(kube: Kube, ns: str, name: str, timeout: float = 30.0) -> None:
    path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        got = await kube.get(path)
        if (got.get("status") or {}).get("phase") == "Bound":
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"claim {ns}/{name} not bound in {timeout}s")


def gen_volumes(
    rng: random.Random, world: World, s: int, i: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes for incoming pod i (templates), and the claims to make for it first."""
    volumes: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    for k in range(rng.choice([1, 1, 1, 2])):
        kind = rng.choice(
            ["local", "local", "local", "dyn", "dyn", "bound", "rwop", "immediate",
             "missing", "ephemeral", "in-tree"]
        )  # fmt: skip
        name = f"v{k}"
        if kind in ("local", "dyn"):
            claim_name = f"SIDE-s{s}-p{i}-{k}"
            modes = ["ReadWriteOncePod"] if rng.random() < 0.1 else ["ReadWriteOnce"]
            size = rng.choice(SIZES)
            claims.append(claim(claim_name, world.ns, f"SIDE-{kind}", size, modes=modes))
        elif kind == "bound" and world.bound:
            claim_name = rng.choice(world.bound)
        elif kind == "rwop" and world.read_write_once_pod:
            claim_name = world.read_write_once_pod
        elif kind == "immediate" and world.immediate:
            claim_name = world.immediate
        elif kind == "in-tree" and world.in_tree:
            claim_name = world.in_tree
        elif kind == "ephemeral":
            template = {"spec": claim("x", world.ns, "SIDE-local", rng.choice(SIZES))["spec"]}
            volumes.append({"name": name, "ephemeral": {"volumeClaimTemplate": template}})
            continue
        else:
            claim_name = f"SIDE-s{s}-p{i}-missing"
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": claim_name}})
    return volumes, claims


def mounts_in_tree_disk(pod: dict[str, Any]) -> bool:
    """The pod mounts the claim of `_in_tree_disk`."""
    return any(
        str((v.get("persistentVolumeClaim") or {}).get("claimName", "")).endswith("-ebs")
        for v in pod["spec"].get("volumes") or ()
    )


class Provisioner:
    """Plays the CSI driver's external-provisioner for `SIDE-dyn` claims: a claim annotated
    with the node a scheduler selected gets a PV on that node, pre-bound to it (the PV
    controller then binds them), as a provisioner that always succeeds."""

    def __init__(self, kube: Kube, namespaces: tuple[str, ...]) -> None:
        self.kube = kube
        self.namespaces = namespaces
        self.made: set[str] = set()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Provisioner:
        self.task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _loop(self) -> None:
        while True:
            for ns in self.namespaces:
                with contextlib.suppress(KubeError):
                    for got in await self.kube.list(
                        f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
                    ):
                        await self._serve(got)
            await asyncio.sleep(0.1)

    async def _serve(self, got: dict[str, Any]) -> None:
        meta, spec = got["metadata"], got["spec"]
        node = (meta.get("annotations") or {}).get("volume.kubernetes.io/selected-node")
        if (
            not node
            or spec.get("volumeName")
            or not str(spec.get("storageClassName")).endswith("-dyn")
        ):
            return
        name = f"pvc-{meta['uid']}"
        if name in self.made:
            return
        self.made.add(name)
        size = spec["resources"]["requests"]["storage"]
        body = pv(
            name, size, spec["storageClassName"],
            {"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]},
            csi={"driver": DRIVER, "volumeHandle": name}, modes=spec["accessModes"],
        )  # fmt: skip
        body["spec"]["claimRef"] = {
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        with contextlib.suppress(KubeError):
            await self.kube.create(PVS, body)


async def reset(kube: Kube, namespaces: tuple[str, ...]) -> None:
    """No claims, PVs or CSINodes left from a scenario (pods are gone already)."""
    for ns in namespaces:
        for got in await kube.list(f"/api/v1/namespaces/{ns}/persistentvolumeclaims"):
            path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{got['metadata']['name']}"
            with contextlib.suppress(KubeError):
                await kube.merge_patch(path, {"metadata": {"finalizers": None}})
                await kube.delete(path)
    for got in await kube.list(PVS):
        path = f"{PVS}/{got['metadata']['name']}"
        with contextlib.suppress(KubeError):
            await kube.merge_patch(path, {"metadata": {"finalizers": None}})
            await kube.delete(path)
    for got in await kube.list(CSINODES):
        with contextlib.suppress(KubeError):
            await kube.delete(f"{CSINODES}/{got['metadata']['name']}")
