"""StorageState: claims, volumes, classes and CSI objects fed by their informers, with
kube-scheduler's assume cache: the PV bindings and claim annotations a pod's Reserve assumed
are what later cycles see until the API shows a newer version of the object (or the binding
cycle fails and restores it), so two pods never pick one PV. Implements framework StorageView.

Every change that can make a pod refused for its volumes fit (a claim created or bound, a PV
added or released, a class, CSINode, CSIDriver or capacity changed) calls `on_change`, which
the scheduler points at its queue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ...framework.plugins.volume_binding.csi_migration import migrated_plugins
from ...framework.storage import (
    HOSTNAME,
    Claim,
    StorageCapacity,
    StorageClass,
    Volume,
    parse_capacity,
    parse_claim,
    parse_csi_node,
    parse_storage_class,
    parse_volume,
)
from ...framework.types import NodeInfo
from ..multimaps import discard

OnChange = Callable[[], object]
T = TypeVar("T")
CsiNode = tuple[dict[str, int | None], frozenset[str]]  # limits per driver, migrated plugins
Attachment = tuple[str, str, str]  # node, attacher, PV name


def _name(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("name") or "")


def _key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _nothing(key: str, value: Any = None) -> None:
    pass


class Objects(Generic[T]):
    """One kind's objects as its informer shows them, parsed, by key (`by_key`); `on_event`
    and `relisted` are the informer's callbacks.

    An event first calls `newer` (what a cycle assumed for that key is out of date), drops the
    object it replaces or deletes (`dropped` undoes what `stored` indexed), stores the new one
    unless it is a deletion, then calls `changed`, for a deletion only if `deletion_changes`
    (False: a deletion cannot make a pod fit). A relist drops what it no longer shows as a
    deletion does, but calls `changed` only if `relist_changes` too."""

    def __init__(
        self,
        parse: Callable[[Mapping[str, Any]], T],
        changed: Callable[[str], None],
        key: Callable[[Mapping[str, Any]], str] = _name,
        *,
        newer: Callable[[str], object] = _nothing,
        stored: Callable[[str, T], None] = _nothing,
        dropped: Callable[[str, T], None] = _nothing,
        deletion_changes: bool = True,
        relist_changes: bool = False,
    ) -> None:
        self.by_key: dict[str, T] = {}
        self._parse = parse
        self._changed = changed
        self._key = key
        self._newer = newer
        self._stored = stored
        self._dropped = dropped
        self._deletion_changes = deletion_changes
        self._relist_changes = relist_changes and deletion_changes

    def on_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        key = self._key(raw)
        self._newer(key)
        old = self.by_key.get(key)
        if old is not None:
            self._dropped(key, old)
        if event_type == "DELETED":
            self.by_key.pop(key, None)
            if not self._deletion_changes:
                return
        else:
            value = self.by_key[key] = self._parse(raw)  # in its place: the order stays
            self._stored(key, value)
        self._changed(key)

    def relisted(self, keys: set[str]) -> None:
        for key in set(self.by_key) - keys:
            self._newer(key)
            self._dropped(key, self.by_key.pop(key))
            if self._relist_changes:
                self._changed(key)


def _parse_csi_node(raw: Mapping[str, Any]) -> CsiNode:
    annotations = (raw.get("metadata") or {}).get("annotations") or {}
    return parse_csi_node(raw), migrated_plugins(annotations)


def _parse_driver(raw: Mapping[str, Any]) -> tuple[bool, bool]:
    """storageCapacity, preventPodSchedulingIfMissing"""
    spec = raw.get("spec") or {}
    return (
        spec.get("storageCapacity") is True,
        spec.get("preventPodSchedulingIfMissing") is True,
    )


def _parse_attachment(raw: Mapping[str, Any]) -> Attachment:
    spec = raw.get("spec") or {}
    pv_name = str((spec.get("source") or {}).get("persistentVolumeName") or "")
    return str(spec.get("nodeName") or ""), str(spec.get("attacher") or ""), pv_name


class StorageState:
    def __init__(self, on_change: OnChange = lambda: None) -> None:
        self.on_change = on_change
        # Called with a claim's key (namespace/name) or a PV's name whenever the API shows a
        # new version of it or its deletion: PreBind waits on them (binder.py).
        self.on_object: Callable[[str], None] = lambda key: None
        # The assume cache: versions our binding cycles wrote or are about to write.
        self.assumed_volumes: dict[str, Volume] = {}
        # Assumed PVs by the claim their claimRef names: a filter asks per claim and node, and
        # a scan of every assumed PV there cost each pod nodes x binds in flight.
        self._assumed_for: dict[str, set[str]] = {}
        self.assumed_claims: dict[str, Claim] = {}
        # PVs by what FindMatchingVolume can use them for (API versions): free ones by class,
        # then by the one hostname they are pinned to ("" for the rest); pre-bound or bound
        # ones by the claim (namespace/name) their claimRef names.
        self._free: dict[str, dict[str, dict[str, Volume]]] = {}
        self._claimed: dict[str, dict[str, Volume]] = {}
        # VolumeAttachments' names per node
        self._attached_on: dict[str, set[str]] = {}
        self._capacity_list: tuple[StorageCapacity, ...] | None = ()
        # Placed pods (bound or assumed) per claim they mount (ClusterState keeps it).
        self.claim_refs: Counter[str] = Counter()

        # What the informers show. Any event is newer than what was assumed for its object.
        self._claims = Objects(parse_claim, self._object_changed, _key, newer=self.restore_claim)
        self._volumes = Objects(
            parse_volume,
            self._object_changed,
            newer=self.restore_volume,
            stored=self._index,
            dropped=self._unindex,
            relist_changes=True,
        )
        self._classes = Objects(parse_storage_class, self._changed, deletion_changes=False)
        self._csi_nodes = Objects(_parse_csi_node, self._changed)
        self._drivers = Objects(_parse_driver, self._changed)
        self._attachments = Objects(
            _parse_attachment,
            self._changed,
            stored=self._attached,
            dropped=self._detached,
            relist_changes=True,
        )
        self._capacities = Objects(
            parse_capacity,
            self._changed,
            _key,
            stored=self._capacities_changed,
            dropped=self._capacities_changed,
            deletion_changes=False,
        )
        # As the API shows them (PreBind checks its writes there: binder.py)
        self.claims = self._claims.by_key  # namespace/name ->
        self.volumes = self._volumes.by_key
        # The informers' callbacks (components.py)
        self.on_claim_event = self._claims.on_event
        self.relisted_claims = self._claims.relisted
        self.on_volume_event = self._volumes.on_event
        self.relisted_volumes = self._volumes.relisted
        self.on_class_event = self._classes.on_event
        self.relisted_classes = self._classes.relisted
        self.on_csi_node_event = self._csi_nodes.on_event
        self.relisted_csi_nodes = self._csi_nodes.relisted
        self.on_driver_event = self._drivers.on_event
        self.relisted_drivers = self._drivers.relisted
        self.on_attachment_event = self._attachments.on_event
        self.relisted_attachments = self._attachments.relisted
        self.on_capacity_event = self._capacities.on_event
        self.relisted_capacities = self._capacities.relisted

    # --- StorageView -------------------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> Claim | None:
        key = f"{namespace}/{name}"
        return self.assumed_claims.get(key) or self.claims.get(key)

    def volume(self, name: str) -> Volume | None:
        return self.assumed_volumes.get(name) or self.volumes.get(name)

    def candidate_volumes(self, claim: Claim, node: NodeInfo) -> Sequence[Volume]:
        assumed = self.assumed_volumes
        found: dict[str, Volume] = {}
        for name, volume in self._claimed.get(claim.key, {}).items():
            found[name] = assumed.get(name, volume)
        for name in self._assumed_for.get(claim.key, ()):  # assumed for it by an earlier cycle
            found.setdefault(name, assumed[name])
        found = {n: v for n, v in found.items() if v.class_name == claim.class_name}
        free = self._free.get(claim.class_name)
        if free:
            host = node.labels.get(HOSTNAME, "")
            for pool in (free.get(host) if host else None, free.get("")):
                for name, volume in (pool or {}).items():
                    found.setdefault(name, assumed.get(name, volume))
        return list(found.values())

    def candidate_hosts(self, claim: Claim) -> frozenset[str] | None:
        hosts: set[str] = set()
        for name in (*self._claimed.get(claim.key, ()), *self._assumed_for.get(claim.key, ())):
            volume = self.volume(name)
            if volume is None or volume.host is None:
                return None
            hosts.add(volume.host)
        free = self._free.get(claim.class_name) or {}
        if "" in free:  # free PVs not pinned to one hostname
            return None
        hosts.update(free)
        return frozenset(hosts)

    def storage_class(self, name: str) -> StorageClass | None:
        return self._classes.by_key.get(name)

    def csi_node(self, node_name: str) -> Mapping[str, int | None] | None:
        found = self._csi_nodes.by_key.get(node_name)
        return found[0] if found is not None else None

    def migrated_plugins(self, node_name: str) -> frozenset[str]:
        found = self._csi_nodes.by_key.get(node_name)
        return found[1] if found is not None else frozenset()

    def driver_publishes_capacity(self, driver: str) -> bool:
        return self._drivers.by_key.get(driver, (False, False))[0]

    def driver_required_on_node(self, driver: str) -> bool:
        return self._drivers.by_key.get(driver, (False, False))[1]

    def capacities(self) -> Sequence[StorageCapacity]:
        if self._capacity_list is None:
            self._capacity_list = tuple(self._capacities.by_key.values())
        return self._capacity_list

    def claim_users(self, key: str) -> int:
        return self.claim_refs.get(key, 0)

    def attachments(self, node_name: str) -> list[tuple[str, str]]:
        found = []
        for name in self._attached_on.get(node_name, ()):
            _, attacher, pv_name = self._attachments.by_key[name]
            volume = self.volumes.get(pv_name)
            if attacher and volume is not None and volume.csi_driver:
                found.append((attacher, volume.csi_handle))
        return found

    # --- the assume cache --------------------------------------------------------------------
    def assume_volume(self, volume: Volume) -> None:
        self.restore_volume(volume.name)
        self.assumed_volumes[volume.name] = volume
        if (ref := volume.claim_ref) is not None:
            self._assumed_for.setdefault(f"{ref.namespace}/{ref.name}", set()).add(volume.name)

    def assume_claim(self, claim: Claim) -> None:
        self.assumed_claims[claim.key] = claim

    def restore_volume(self, name: str) -> None:
        volume = self.assumed_volumes.pop(name, None)
        if volume is None or (ref := volume.claim_ref) is None:
            return
        discard(self._assumed_for, f"{ref.namespace}/{ref.name}", name)

    def restore_claim(self, key: str) -> None:
        self.assumed_claims.pop(key, None)

    # --- informers ---------------------------------------------------------------------------
    def _changed(self, key: str) -> None:
        self.on_change()

    def _object_changed(self, key: str) -> None:  # a claim or a PV: PreBind may wait on it
        self.on_object(key)
        self.on_change()

    def _index(self, name: str, volume: Volume) -> None:
        ref = volume.claim_ref
        if ref is not None:
            self._claimed.setdefault(f"{ref.namespace}/{ref.name}", {})[name] = volume
        else:
            by_host = self._free.setdefault(volume.class_name, {})
            by_host.setdefault(volume.host or "", {})[name] = volume

    def _unindex(self, name: str, volume: Volume) -> None:
        ref = volume.claim_ref
        if ref is not None:
            key = f"{ref.namespace}/{ref.name}"
            claimed = self._claimed.get(key, {})
            claimed.pop(name, None)
            if not claimed:
                self._claimed.pop(key, None)
        else:
            by_host = self._free.get(volume.class_name, {})
            pool = by_host.get(volume.host or "", {})
            pool.pop(name, None)
            if not pool:
                by_host.pop(volume.host or "", None)

    def _attached(self, name: str, attachment: Attachment) -> None:
        self._attached_on.setdefault(attachment[0], set()).add(name)

    def _detached(self, name: str, attachment: Attachment) -> None:
        discard(self._attached_on, attachment[0], name)

    def _capacities_changed(self, key: str, capacity: StorageCapacity) -> None:
        self._capacity_list = None
