"""NodeVolumeLimits (CSI): the node's CSINode caps how many volumes of each driver it attaches;
the pod's new claims (counted by driver and volume handle, or by class for claims not bound
yet) must fit beside those of the pods already there. A driver whose CSIDriver sets
preventPodSchedulingIfMissing must be on the node (VolumeLimitScaling, on since 1.37).
Unschedulable: removing pods frees attachments.

VolumeAttachments of CSI PVs on the node count too (once, unless a pod there accounts for the
volume). In-tree volumes migrated to CSI (GCE PD, EBS, Azure Disk, Cinder, Portworx: a PV's
source, an inline volume, or a class whose provisioner names the plugin) count under their CSI
driver on a node that has a CSINode, as kube-scheduler 1.37 counts them."""

from __future__ import annotations

from collections.abc import Mapping

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ..storage import MIGRATED
from ..types import NodeInfo, PodInfo
from ..view import StorageView

EXCEEDED = "node(s) exceed max volume count"


def _attachable(
    pod: PodInfo, storage: StorageView, new: bool, migrated: bool
) -> dict[str, str] | str:
    """filterAttachableVolumes: unique volume name -> driver of the pod's claims and inline
    migrated in-tree volumes (a new pod's missing claim is a refusal; an existing pod's is
    skipped). `migrated`: the node has a CSINode, so in-tree volumes count under their CSI
    driver (kube-scheduler's isCSIMigrationOn in 1.37)."""
    out: dict[str, str] = {}
    if migrated:
        for driver, handle in pod.volumes.in_tree:
            out[f"{driver}/{handle}"] = driver
    for _, name, ephemeral in pod.volumes.claims:
        if not name:
            return "PersistentVolumeClaim had no name"
        claim = storage.claim(pod.namespace, name)
        if claim is None:
            if new:
                return (
                    f"looking up PVC {pod.namespace}/{name}: "
                    f'persistentvolumeclaim "{name}" not found'
                )
            continue
        if ephemeral and claim.controller_uid != pod.uid:
            return (
                f"PVC {claim.namespace}/{claim.name} was not created for pod "
                f"{pod.namespace}/{pod.name} (pod is not owner)"
            )
        driver, handle = "", ""
        volume = storage.volume(claim.volume_name) if claim.volume_name else None
        if volume is not None:
            driver, handle = volume.csi_driver, volume.csi_handle
            if not driver and volume.in_tree is not None and migrated:
                driver, handle = volume.in_tree
        elif claim.class_name:
            cls = storage.storage_class(claim.class_name)
            if cls is not None:  # not bound yet: one new volume of the class's provisioner
                driver, handle = cls.provisioner, f"-{claim.namespace}/{claim.name}"
                if driver in MIGRATED:
                    driver = MIGRATED[driver] if migrated else ""
        if driver and handle:
            out[f"{driver}/{handle}"] = driver
    return out


def _new_volumes(ctx: CycleContext, migrated: bool) -> dict[str, str] | str:
    return _attachable(ctx.pod, ctx.state.storage, new=True, migrated=migrated)


def _new_volumes_migrated(ctx: CycleContext) -> dict[str, str] | str:
    return _new_volumes(ctx, True)


def _new_volumes_not_migrated(ctx: CycleContext) -> dict[str, str] | str:
    return _new_volumes(ctx, False)


class NodeVolumeLimits(FilterPlugin):
    name = "NodeVolumeLimits"
    inputs = Inputs(pod=("volumes",), placed=("volumes",))
    node_local = False  # reads claims, volumes and the pods on the node

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if ctx.pod.volumes.attachable else ()

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        if not ctx.pod.volumes.attachable:
            return None
        storage = ctx.state.storage
        csi_node = storage.csi_node(node.name)
        migrated = csi_node is not None
        new = ctx.prefiltered(_new_volumes_migrated if migrated else _new_volumes_not_migrated)
        if isinstance(new, str):
            return [new]
        if not new:
            return None
        for driver in set(new.values()):
            if storage.driver_required_on_node(driver) and (
                csi_node is None or driver not in csi_node
            ):
                return [f"{driver} CSI driver is not installed on the node"]
        limits: Mapping[str, int] = {
            d: count for d, count in (csi_node or {}).items() if count is not None
        }
        if not limits:
            return None
        attached: dict[str, str] = {}
        for other in ctx.state.pods_on(node.name):
            if other.volumes.attachable:
                found = _attachable(other, storage, new=False, migrated=migrated)
                if isinstance(found, dict):
                    attached.update(found)
        counts: dict[str, int] = {}
        for driver in attached.values():
            counts[driver] = counts.get(driver, 0) + 1
        for driver, handle in storage.attachments(node.name):  # attached, no pod counted
            if f"{driver}/{handle}" not in attached:
                counts[driver] = counts.get(driver, 0) + 1
        adding: dict[str, int] = {}
        for unique, driver in new.items():
            if unique not in attached:
                adding[driver] = adding.get(driver, 0) + 1
        for driver, count in adding.items():
            limit = limits.get(driver)
            if limit is not None and counts.get(driver, 0) + count > limit:
                return [EXCEEDED]
        return None

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        return reasons[0] != EXCEEDED and not reasons[0].endswith("is not installed on the node")
