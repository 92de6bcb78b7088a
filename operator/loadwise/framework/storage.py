"""Storage objects as the volume plugins read them: claims, volumes, classes and CSI objects,
parsed once from raw API objects (as types.py parses pods and nodes), and the pod's own volume
references. Parsing never raises: what cannot be understood is kept as "nothing matches"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..resources import to_amount
from .selectors import (
    NodeSelectorTerm,
    Selector,
    parse_label_selector,
    parse_node_selector_term,
)

BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
HOSTNAME = "kubernetes.io/hostname"
# In-tree volume plugins migrated to CSI (csi-translation-lib), as NodeVolumeLimits counts them:
# the plugin name a class's provisioner says, and the CSI driver its volumes count under.
MIGRATED = {
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    volume_name: str  # spec.volumeName: bound, or pre-bound by its author
    phase: str
    class_name: str  # the beta annotation first, then spec.storageClassName ("" when none)
    access_modes: frozenset[str]
    request: int  # bytes of storage requested (0 when none)
    has_request: bool
    selector: Selector | None
    volume_mode: str  # Filesystem unless Block
    volume_attributes_class: str
    annotations: Mapping[str, str]
    deleting: bool
    controller_uid: str  # the ownerReference with controller: true (ephemeral claims' pod)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """kube-scheduler's isPVCFullyBound: the PV controller finished the binding."""
        return bool(self.volume_name) and BIND_COMPLETED in self.annotations

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(SELECTED_NODE)


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume."""

    name: str
    uid: str
    resource_version: str
    phase: str
    class_name: str
    access_modes: frozenset[str]
    capacity: int
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node_affinity: tuple[NodeSelectorTerm, ...] | None  # spec.nodeAffinity.required, if any
    claim_ref: ClaimRef | None
    volume_mode: str
    volume_attributes_class: str
    csi_driver: str  # spec.csi.driver, "" for other kinds
    csi_handle: str
    deleting: bool
    in_tree: tuple[str, str] | None = None  # a migrated in-tree source: (CSI driver, handle)

    @property
    def host(self) -> str | None:
        """The one `kubernetes.io/hostname` value its node affinity allows, when that is all
        it says (a local PV): the storage state indexes such volumes by node."""
        terms = self.node_affinity
        if terms is None or len(terms) != 1 or terms[0].fields:
            return None
        (term,) = terms
        if len(term.expressions) != 1:
            return None
        (requirement,) = term.expressions
        if (
            requirement.key == HOSTNAME
            and requirement.operator == "In"
            and len(requirement.values) == 1
        ):
            return requirement.values[0]
        return None

    def fits_node(self, labels: Mapping[str, str]) -> bool:
        """component-helpers' CheckNodeAffinity: the node's labels only (a matchFields term
        sees a node without a name, as there)."""
        terms = self.node_affinity
        return terms is None or any(term.matches("", labels) for term in terms)

    def bound_to(self, claim: Claim) -> bool:
        """IsVolumeBoundToClaim."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str | None  # None: unset (kube-scheduler reports an error)
    allowed_topologies: tuple[
        tuple[tuple[str, tuple[str, ...]], ...], ...
    ]  # terms of (key, values)

    @property
    def delays_binding(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    def topology_allows(self, labels: Mapping[str, str]) -> bool:
        """v1helper.MatchTopologySelectorTerms: no terms match every node."""
        if not self.allowed_topologies:
            return True
        return any(
            all(labels.get(key) in values for key, values in term)
            for term in self.allowed_topologies
        )


@dataclass(frozen=True, slots=True)
class StorageCapacity:
    """A CSIStorageCapacity: room one class has for new volumes, on the nodes it selects."""

    namespace: str
    name: str
    class_name: str
    node_topology: Selector | None  # None: reaches no node
    limit: int | None  # maximumVolumeSize if set, else capacity; None when neither is

    def reaches(self, labels: Mapping[str, str]) -> bool:
        return self.node_topology is not None and self.node_topology.matches(labels)


@dataclass(frozen=True, slots=True)
class PodVolumes:
    """What of a pod's volumes the volume plugins read. `claims`: (volume name, claim name,
    ephemeral) for every PVC and generic ephemeral volume, the claim named as the
    ephemeral-volume controller names it; `inline_csi`: (driver, volume name) of inline CSI
    volumes; `disks`: the in-tree disks VolumeRestrictions compares."""

    claims: tuple[tuple[str, str, bool], ...] = ()
    inline_csi: tuple[tuple[str, str], ...] = ()
    disks: tuple[tuple[str, ...], ...] = ()
    in_tree: tuple[tuple[str, str], ...] = ()  # inline migrated in-tree volumes: (driver, handle)

    def __bool__(self) -> bool:
        return bool(self.claims or self.inline_csi or self.disks or self.in_tree)

    @property
    def attachable(self) -> bool:
        """What NodeVolumeLimits counts: claims and inline migrated in-tree volumes."""
        return bool(self.claims or self.in_tree)

    @property
    def claim_names(self) -> tuple[str, ...]:
        return tuple(claim for _, claim, _ in self.claims)


NO_VOLUMES = PodVolumes()


def parse_pod_volumes(pod_name: str, spec: Mapping[str, Any]) -> PodVolumes:
    """The pod's claims, inline CSI volumes and in-tree disks; NO_VOLUMES for the common pod
    (config maps, secrets, projected tokens, emptyDir and hostPath only)."""
    claims: list[tuple[str, str, bool]] = []
    inline: list[tuple[str, str]] = []
    disks: list[tuple[str, ...]] = []
    in_tree: list[tuple[str, str]] = []
    for volume in spec.get("volumes") or ():
        name = str(volume.get("name") or "")
        if (pvc := volume.get("persistentVolumeClaim")) is not None:
            claims.append((name, str(pvc.get("claimName") or ""), False))
        elif "ephemeral" in volume:
            claims.append((name, f"{pod_name}-{name}", True))
        elif (csi := volume.get("csi")) is not None:
            inline.append((str(csi.get("driver") or ""), name))
        else:
            if (disk := _disk(volume)) is not None:
                disks.append(disk)
            if (migrated := translated(volume)) is not None:
                in_tree.append(migrated)
    if not (claims or inline or disks or in_tree):
        return NO_VOLUMES
    return PodVolumes(tuple(claims), tuple(inline), tuple(disks), tuple(in_tree))


def translated(source: Mapping[str, Any]) -> tuple[str, str] | None:
    """A migrated in-tree volume source (inline, or a PV's spec) as its CSI driver and a
    volume handle: the same disk always gives the same handle, which is all the counting of
    attachments needs (csi-translation-lib writes GCE's with its zone; ours says UNSPECIFIED)."""
    if (gce := source.get("gcePersistentDisk")) is not None:
        disk = f"projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{gce.get('pdName') or ''}"
        return MIGRATED["kubernetes.io/gce-pd"], disk
    if (ebs := source.get("awsElasticBlockStore")) is not None:
        volume_id = str(ebs.get("volumeID") or "")
        if volume_id.startswith("aws://"):  # aws://zone/vol-id: KubernetesVolumeIDToEBSVolumeID
            volume_id = volume_id.rsplit("/", 1)[-1]
        return MIGRATED["kubernetes.io/aws-ebs"], volume_id
    if (azure := source.get("azureDisk")) is not None:
        return MIGRATED["kubernetes.io/azure-disk"], str(azure.get("diskURI") or "")
    if (cinder := source.get("cinder")) is not None:
        return MIGRATED["kubernetes.io/cinder"], str(cinder.get("volumeID") or "")
    if (portworx := source.get("portworxVolume")) is not None:
        return MIGRATED["kubernetes.io/portworx-volume"], str(portworx.get("volumeID") or "")
    return None


def _disk(volume: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The identity VolumeRestrictions' isVolumeConflict compares, with the read-only flag last."""
    if (gce := volume.get("gcePersistentDisk")) is not None:
        return ("gce", str(gce.get("pdName") or ""), "", _flag(gce.get("readOnly")))
    if (ebs := volume.get("awsElasticBlockStore")) is not None:
        return ("ebs", str(ebs.get("volumeID") or ""), "", "")
    if (iscsi := volume.get("iscsi")) is not None:
        return ("iscsi", str(iscsi.get("iqn") or ""), "", _flag(iscsi.get("readOnly")))
    if (rbd := volume.get("rbd")) is not None:
        monitors = ",".join(sorted(str(m) for m in rbd.get("monitors") or ()))
        image = f"{rbd.get('pool') or 'rbd'}/{rbd.get('image') or ''}"
        return ("rbd", image, monitors, _flag(rbd.get("readOnly")))
    return None


def _flag(value: Any) -> str:
    return "ro" if value is True else ""


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw.get("metadata") or {}


def _bytes(value: Any) -> int:
    try:
        return to_amount("storage", value) if value is not None else 0
    except (ValueError, TypeError, ArithmeticError):
        return 0


def _controller_uid(meta: Mapping[str, Any]) -> str:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("uid") or "")
    return ""


def _class_of(meta: Mapping[str, Any], spec_class: Any) -> str:
    annotations = meta.get("annotations") or {}
    if BETA_CLASS in annotations:
        return str(annotations[BETA_CLASS])
    return str(spec_class or "")


def parse_claim(raw: Mapping[str, Any]) -> Claim:
    meta, spec = _meta(raw), raw.get("spec") or {}
    requests = (spec.get("resources") or {}).get("requests") or {}
    try:
        selector = parse_label_selector(spec.get("selector"))
    except (AttributeError, TypeError):
        selector = Selector((), ())  # cannot be read: kube-scheduler errors; match nothing below
    return Claim(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        volume_name=str(spec.get("volumeName") or ""),
        phase=str((raw.get("status") or {}).get("phase") or ""),
        class_name=_class_of(meta, spec.get("storageClassName")),
        access_modes=frozenset(str(m) for m in spec.get("accessModes") or ()),
        request=_bytes(requests.get("storage")),
        has_request="storage" in requests,
        selector=selector,
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        volume_attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        annotations=dict(meta.get("annotations") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        controller_uid=_controller_uid(meta),
    )


def parse_volume(raw: Mapping[str, Any]) -> Volume:
    meta, spec = _meta(raw), raw.get("spec") or {}
    required = (spec.get("nodeAffinity") or {}).get("required")
    terms = None
    if required is not None:
        terms = tuple(parse_node_selector_term(t) for t in required.get("nodeSelectorTerms") or ())
    ref = spec.get("claimRef")
    csi = spec.get("csi") or {}
    return Volume(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        phase=str((raw.get("status") or {}).get("phase") or ""),
        class_name=_class_of(meta, spec.get("storageClassName")),
        access_modes=frozenset(str(m) for m in spec.get("accessModes") or ()),
        capacity=_bytes((spec.get("capacity") or {}).get("storage")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        node_affinity=terms,
        claim_ref=ClaimRef(
            str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or "")
        )
        if ref
        else None,
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        volume_attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        csi_driver=str(csi.get("driver") or ""),
        csi_handle=str(csi.get("volumeHandle") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        in_tree=translated(spec) if not csi else None,
    )


def parse_storage_class(raw: Mapping[str, Any]) -> StorageClass:
    terms = []
    for term in raw.get("allowedTopologies") or ():
        terms.append(
            tuple(
                (str(e.get("key") or ""), tuple(str(v) for v in e.get("values") or ()))
                for e in term.get("matchLabelExpressions") or ()
            )
        )
    mode = raw.get("volumeBindingMode")
    return StorageClass(
        name=str(_meta(raw).get("name") or ""),
        provisioner=str(raw.get("provisioner") or ""),
        binding_mode=str(mode) if mode is not None else None,
        allowed_topologies=tuple(terms),
    )


def parse_csi_node(raw: Mapping[str, Any]) -> dict[str, int | None]:
    """CSINode: driver name -> its allocatable volume count on the node (None: no limit)."""
    out: dict[str, int | None] = {}
    for driver in (raw.get("spec") or {}).get("drivers") or ():
        count = (driver.get("allocatable") or {}).get("count")
        out[str(driver.get("name") or "")] = int(count) if isinstance(count, int) else None
    return out


def parse_capacity(raw: Mapping[str, Any]) -> StorageCapacity:
    meta = _meta(raw)
    limit = raw.get("maximumVolumeSize")
    if limit is None:
        limit = raw.get("capacity")
    try:
        topology = parse_label_selector(raw.get("nodeTopology"))
    except (AttributeError, TypeError):
        topology = None
    return StorageCapacity(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        class_name=str(raw.get("storageClassName") or ""),
        node_topology=topology,
        limit=_bytes(limit) if limit is not None else None,
    )
