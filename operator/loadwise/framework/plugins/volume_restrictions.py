"""VolumeRestrictions: in-tree disks that two pods on one node may not share (GCE PD, AWS EBS,
iSCSI, RBD, as isVolumeConflict compares them), and ReadWriteOncePod claims already in use by a
placed pod anywhere (both Unschedulable: removing pods can lift them)."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ..storage import READ_WRITE_ONCE_POD
from ..types import NodeInfo, PodInfo

DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already "
    "in-use by another pod"
)


def _read_write_once_pod(ctx: CycleContext) -> tuple[str, ...] | str:
    """PreFilter: the keys of the pod's ReadWriteOncePod claims (PVC volumes only), or the
    refusal for a claim that does not exist."""
    pod, storage = ctx.pod, ctx.state.storage
    keys = []
    for _, name, ephemeral in pod.volumes.claims:
        if ephemeral:
            continue
        claim = storage.claim(pod.namespace, name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if READ_WRITE_ONCE_POD in claim.access_modes:
            keys.append(claim.key)
    return tuple(dict.fromkeys(keys))


class VolumeRestrictions(FilterPlugin):
    name = "VolumeRestrictions"
    inputs = Inputs(pod=("volumes",), placed=("volumes",))
    node_local = False  # reads claims and pods on other nodes

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if ctx.pod.volumes else ()

    def prefilter(self, ctx: CycleContext) -> str | None:
        if not ctx.pod.volumes.claims:
            return None
        found = ctx.prefiltered(_read_write_once_pod)
        return found if isinstance(found, str) else None

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        pod = ctx.pod
        if not pod.volumes:
            return None
        if pod.volumes.disks and any(
            _conflict(disk, other)
            for other in ctx.state.pods_on(node.name)
            for disk in pod.volumes.disks
        ):
            return [DISK_CONFLICT]
        if not pod.volumes.claims:
            return None
        keys = ctx.prefiltered(_read_write_once_pod)
        if isinstance(keys, str):
            return [keys]
        storage = ctx.state.storage
        if any(storage.claim_users(key) for key in keys):
            return [RWOP_CONFLICT]
        return None

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        return reasons[0] not in (DISK_CONFLICT, RWOP_CONFLICT)


def _conflict(disk: tuple[str, ...], other: PodInfo) -> bool:
    """isVolumeConflict: the same disk, unless both mount it read-only (EBS: always)."""
    kind, ident, monitors, read_only = disk
    for theirs in other.volumes.disks:
        if theirs[0] != kind or theirs[1] != ident:
            continue
        if kind == "ebs":
            return True
        if kind == "rbd" and not _monitors(monitors) & _monitors(theirs[2]):
            continue
        if not (read_only and theirs[3]):
            return True
    return False


def _monitors(joined: str) -> set[str]:
    return {m for m in joined.split(",") if m}
