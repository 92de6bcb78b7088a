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
from typing import Any

from ..framework.csi_migration import migrated_plugins
from ..framework.storage import (
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
from ..framework.types import NodeInfo
from .multimaps import discard

OnChange = Callable[[], None]


def _name(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("name") or "")


def _key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class StorageState:
    def __init__(self) -> None:
        self.on_change: OnChange = lambda: None
        # Called with a claim's key (namespace/name) or a PV's name whenever the API shows a
        # new version of it or its deletion: PreBind waits on them (volume_binder.py).
        self.on_object: Callable[[str], None] = lambda key: None
        self.claims: dict[str, Claim] = {}  # namespace/name -> as the API shows it
        self.volumes: dict[str, Volume] = {}
        # PVs by what FindMatchingVolume can use them for (API versions): free ones by class,
        # then by the one hostname they are pinned to ("" for the rest); pre-bound or bound
        # ones by the claim (namespace/name) their claimRef names.
        self._free: dict[str, dict[str, dict[str, Volume]]] = {}
        self._claimed: dict[str, dict[str, Volume]] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, dict[str, int | None]] = {}
        self.migrated: dict[str, frozenset[str]] = {}  # CSINode -> its migrated plugins
        self.drivers: dict[str, tuple[bool, bool]] = {}  # storageCapacity, preventIfMissing
        self._capacities: dict[str, StorageCapacity] = {}
        # VolumeAttachments: name -> (node, attacher, PV name); and their names per node
        self._attachments: dict[str, tuple[str, str, str]] = {}
        self._attached_on: dict[str, set[str]] = {}
        self._capacity_list: tuple[StorageCapacity, ...] = ()
        # The assume cache: versions our binding cycles wrote or are about to write.
        self.assumed_volumes: dict[str, Volume] = {}
        # Assumed PVs by the claim their claimRef names: a filter asks per claim and node, and
        # a scan of every assumed PV there cost each pod nodes x binds in flight.
        self._assumed_for: dict[str, set[str]] = {}
        self.assumed_claims: dict[str, Claim] = {}
        # Placed pods (bound or assumed) per claim they mount (ClusterState keeps it).
        self.claim_refs: Counter[str] = Counter()

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
        return self.classes.get(name)

    def csi_node(self, node_name: str) -> Mapping[str, int | None] | None:
        return self.csi_nodes.get(node_name)

    def migrated_plugins(self, node_name: str) -> frozenset[str]:
        return self.migrated.get(node_name, frozenset())

    def driver_publishes_capacity(self, driver: str) -> bool:
        return self.drivers.get(driver, (False, False))[0]

    def driver_required_on_node(self, driver: str) -> bool:
        return self.drivers.get(driver, (False, False))[1]

    def capacities(self) -> Sequence[StorageCapacity]:
        return self._capacity_list

    def claim_users(self, key: str) -> int:
        return self.claim_refs.get(key, 0)

    def attachments(self, node_name: str) -> list[tuple[str, str]]:
        found = []
        for name in self._attached_on.get(node_name, ()):
            _, attacher, pv_name = self._attachments[name]
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
    def on_claim_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        key = _key(raw)
        self.assumed_claims.pop(key, None)  # any event is newer than what was assumed
        if event_type == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = parse_claim(raw)
        self.on_object(key)
        self.on_change()

    def relisted_claims(self, keys: set[str]) -> None:
        for key in set(self.claims) - keys:
            del self.claims[key]
            self.assumed_claims.pop(key, None)

    def on_volume_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = _name(raw)
        self.restore_volume(name)  # any event is newer than what was assumed
        old = self.volumes.pop(name, None)
        if old is not None:
            self._unindex(old)
        if event_type != "DELETED":
            volume = self.volumes[name] = parse_volume(raw)
            self._index(volume)
        self.on_object(name)
        self.on_change()

    def _index(self, volume: Volume) -> None:
        ref = volume.claim_ref
        if ref is not None:
            self._claimed.setdefault(f"{ref.namespace}/{ref.name}", {})[volume.name] = volume
        else:
            by_host = self._free.setdefault(volume.class_name, {})
            by_host.setdefault(volume.host or "", {})[volume.name] = volume

    def _unindex(self, volume: Volume) -> None:
        ref = volume.claim_ref
        if ref is not None:
            key = f"{ref.namespace}/{ref.name}"
            claimed = self._claimed.get(key, {})
            claimed.pop(volume.name, None)
            if not claimed:
                self._claimed.pop(key, None)
        else:
            by_host = self._free.get(volume.class_name, {})
            pool = by_host.get(volume.host or "", {})
            pool.pop(volume.name, None)
            if not pool:
                by_host.pop(volume.host or "", None)

    def relisted_volumes(self, names: set[str]) -> None:
        for name in set(self.volumes) - names:
            self.on_volume_event("DELETED", {"metadata": {"name": name}})

    def on_class_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = _name(raw)
        if event_type == "DELETED":
            self.classes.pop(name, None)
        else:
            self.classes[name] = parse_storage_class(raw)
            self.on_change()

    def relisted_classes(self, names: set[str]) -> None:
        for name in set(self.classes) - names:
            del self.classes[name]

    def on_csi_node_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = _name(raw)
        if event_type == "DELETED":
            self.csi_nodes.pop(name, None)
            self.migrated.pop(name, None)
        else:
            self.csi_nodes[name] = parse_csi_node(raw)
            annotations = (raw.get("metadata") or {}).get("annotations") or {}
            self.migrated[name] = migrated_plugins(annotations)
        self.on_change()

    def relisted_csi_nodes(self, names: set[str]) -> None:
        for name in set(self.csi_nodes) - names:
            del self.csi_nodes[name]
            self.migrated.pop(name, None)

    def on_driver_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = _name(raw)
        if event_type == "DELETED":
            self.drivers.pop(name, None)
        else:
            spec = raw.get("spec") or {}
            self.drivers[name] = (
                spec.get("storageCapacity") is True,
                spec.get("preventPodSchedulingIfMissing") is True,
            )
        self.on_change()

    def relisted_drivers(self, names: set[str]) -> None:
        for name in set(self.drivers) - names:
            del self.drivers[name]

    def on_attachment_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = _name(raw)
        old = self._attachments.pop(name, None)
        if old is not None:
            self._attached_on.get(old[0], set()).discard(name)
        if event_type != "DELETED":
            spec = raw.get("spec") or {}
            node = str(spec.get("nodeName") or "")
            pv_name = str((spec.get("source") or {}).get("persistentVolumeName") or "")
            self._attachments[name] = (node, str(spec.get("attacher") or ""), pv_name)
            self._attached_on.setdefault(node, set()).add(name)
        self.on_change()

    def relisted_attachments(self, names: set[str]) -> None:
        for name in set(self._attachments) - names:
            self.on_attachment_event("DELETED", {"metadata": {"name": name}})

    def on_capacity_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        key = _key(raw)
        if event_type == "DELETED":
            self._capacities.pop(key, None)
        else:
            self._capacities[key] = parse_capacity(raw)
        self._capacity_list = tuple(self._capacities.values())
        if event_type != "DELETED":
            self.on_change()

    def relisted_capacities(self, keys: set[str]) -> None:
        for key in set(self._capacities) - keys:
            del self._capacities[key]
        self._capacity_list = tuple(self._capacities.values())
