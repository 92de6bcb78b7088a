"""VolumeZone: a bound PersistentVolume's zone and region labels must match the node's (a node
with none of those labels takes any volume); UnschedulableAndUnresolvable."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ..types import NodeInfo

CONFLICT = "node(s) had no available volume zone"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}

Topology = tuple[tuple[str, frozenset[str]], ...]  # (label key, the volume's values)


def _pv_topologies(ctx: CycleContext) -> Topology | str:
    """PreFilter (getPVbyPod): the topology labels of the PVs the pod's PVC volumes are bound
    to (unbound claims of a WaitForFirstConsumer class skipped), or a refusal."""
    pod, storage = ctx.pod, ctx.state.storage
    out: list[tuple[str, frozenset[str]]] = []
    for _, name, ephemeral in pod.volumes.claims:
        if ephemeral:
            continue
        if not name:
            return "PersistentVolumeClaim had no name"
        claim = storage.claim(pod.namespace, name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if not claim.volume_name:
            if not claim.class_name:
                return "PersistentVolumeClaim had no pv name and storageClass name"
            cls = storage.storage_class(claim.class_name)
            if cls is None:
                return f'storageclass.storage.k8s.io "{claim.class_name}" not found'
            if cls.binding_mode is None:
                return f'VolumeBindingMode not set for StorageClass "{claim.class_name}"'
            if cls.delays_binding:
                continue
            return "PersistentVolume had no name"
        volume = storage.volume(claim.volume_name)
        if volume is None:
            return f'persistentvolume "{claim.volume_name}" not found'
        for key in TOPOLOGY_LABELS:
            value = volume.labels.get(key)
            if value is None:
                continue
            zones = value.split("__")  # volumehelpers.LabelZonesToSet
            if any(not z.strip() for z in zones):
                continue
            out.append((key, frozenset(z.strip() for z in zones)))
    return tuple(out)


class VolumeZone(FilterPlugin):
    name = "VolumeZone"
    always_unresolvable = True
    inputs = Inputs(pod=("volumes",), node=("labels",))
    node_local = False  # reads claims and volumes

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if ctx.pod.volumes.claims else ()

    def prefilter(self, ctx: CycleContext) -> str | None:
        if not ctx.pod.volumes.claims:
            return None
        found = ctx.prefiltered(_pv_topologies)
        return found if isinstance(found, str) else None

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        if not ctx.pod.volumes.claims:
            return None
        topologies = ctx.prefiltered(_pv_topologies)
        if isinstance(topologies, str):
            return [topologies]
        labels = node.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return None
        for key, values in topologies:
            value = labels.get(key)
            if value is None:
                value = labels.get(_GA.get(key, key))
            if value is None or value not in values:
                return [CONFLICT]
        return None
