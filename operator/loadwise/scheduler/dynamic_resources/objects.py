"""What the device allocator (helper.py) must hold, kept here as the informers show it, and sent
as changes before each filter: ResourceSlices, DeviceClasses, the allocated ResourceClaims (their
devices are taken) and the labels of nodes (for slices shared by nodes through a selector).

Also the allocations loadwise made but the informer does not show yet (kube-scheduler's
in-flight allocations): Reserve adds one, and it is sent with every filter until the claim's
event shows it allocated (or shows the write that undid it), so no device is handed out twice
while a bind is on its way.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...framework.resource_claims import Claim
from .claims import ResourceClaims

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
FOREIGN_WINDOW = 600.0  # seconds a pool counts as shared with another scheduler after its last


@dataclass(slots=True)
class InFlight:
    allocation: Mapping[str, Any]
    # set when the allocation was written and then undone: held until the claim's event shows
    # this resourceVersion or a later one (0: until the event shows the claim allocated)
    until_version: int = 0


def _version(claim: Claim) -> int:
    try:
        return int(claim.resource_version)
    except ValueError:
        return 0


class DeviceObjects:
    def __init__(self, claims: ResourceClaims, changed: Callable[[], object]) -> None:
        """`changed`: devices may have been freed or added (pods that found none try again)."""
        self.claims = claims
        self.changed = changed
        self.slices: dict[str, Mapping[str, Any]] = {}
        self.classes: dict[str, Mapping[str, Any]] = {}
        self.slice_nodes: dict[str, str] = {}  # slice -> its node ("" shared through a selector)
        self.slice_devices: dict[str, int] = {}  # slice -> how many devices it publishes
        self.inflight: dict[str, InFlight] = {}  # claim uid -> its allocation
        self._pending: list[dict[str, Any]] = []
        self._claims_sent: dict[str, str] = {}  # claim key -> resourceVersion sent
        # Who holds which device, as the informer shows it (two schedulers on one node's
        # devices can hand one out twice: claim_binding.py checks this before it binds).
        self.holders: dict[str, set[str]] = {}  # driver/pool/device -> claim keys (one, or a bug)
        self._held: dict[str, list[str]] = {}  # claim key -> its devices
        self.ours: dict[str, str] = {}  # claim key -> uid, of the claims loadwise allocated
        self.foreign: dict[str, float] = {}  # driver/pool -> when another allocated there
        self._labels_sent: dict[str, Mapping[str, str]] = {}
        claims.on_change(self._claim_changed)

    # --- informers in ------------------------------------------------------------------------
    def on_slice_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = str((raw.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self._drop("ResourceSlice", name, self.slices)
            self.slice_nodes.pop(name, None)
            self.slice_devices.pop(name, None)
        else:
            self.slices[name] = raw
            spec = raw.get("spec") or {}
            self.slice_nodes[name] = str(spec.get("nodeName") or "")
            self.slice_devices[name] = len(spec.get("devices") or ())
            self._pending.append({"op": "upsert", "kind": "ResourceSlice", "object": raw})
        self.changed()

    def relisted_slices(self, names: set[str]) -> None:
        for name in set(self.slices) - names:
            self._drop("ResourceSlice", name, self.slices)
            self.slice_nodes.pop(name, None)
            self.slice_devices.pop(name, None)

    def on_class_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = str((raw.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self._drop("DeviceClass", name, self.classes)
        else:
            self.classes[name] = raw
            self._pending.append({"op": "upsert", "kind": "DeviceClass", "object": raw})
        self.changed()

    def relisted_classes(self, names: set[str]) -> None:
        for name in set(self.classes) - names:
            self._drop("DeviceClass", name, self.classes)

    def _drop(self, kind: str, name: str, kept: dict[str, Mapping[str, Any]]) -> None:
        if kept.pop(name, None) is not None:
            self._pending.append({"op": "delete", "kind": kind, "name": name})

    def _claim_changed(self, key: str | None) -> None:
        keys = list(self._claims_sent) if key is None else [key]
        for k in keys:
            claim = self.claims.by_key.get(k)
            entry = self.inflight.get(claim.uid) if claim is not None else None
            if (
                claim is not None
                and entry is not None
                and (
                    claim.allocation is not None
                    or (entry.until_version and _version(claim) >= entry.until_version)
                )
            ):
                del self.inflight[claim.uid]  # the informer shows what was written
            self._hold(k, claim)
            sent = self._claims_sent.get(k)
            if claim is not None and claim.allocation is not None:
                if sent != claim.resource_version:
                    self._claims_sent[k] = claim.resource_version
                    self._pending.append(
                        {"op": "upsert", "kind": "ResourceClaim", "object": claim.raw}
                    )
            elif sent is not None:  # deallocated or gone: its devices are free
                del self._claims_sent[k]
                namespace, _, name = k.partition("/")
                self._pending.append(
                    {"op": "delete", "kind": "ResourceClaim", "namespace": namespace, "name": name}
                )
        self.changed()

    def _hold(self, key: str, claim: Claim | None) -> None:
        for device in self._held.pop(key, ()):
            keys = self.holders.get(device)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.holders[device]
        if claim is None or claim.allocation is None:
            self.ours.pop(key, None)
            return
        devices = exclusive_devices(claim.allocation)
        self._held[key] = devices
        for device in devices:
            self.holders.setdefault(device, set()).add(key)
        if self.ours.get(key) != claim.uid:  # another scheduler's: its pools are shared
            now = time.monotonic()
            for device in devices:
                self.foreign[device.rsplit("/", 1)[0]] = now

    def taken_by_other(self, devices: Iterable[str], key: str) -> str | None:
        """`device (claim)` for the first of `devices` another claim holds, or None."""
        for device in devices:
            others = sorted(self.holders.get(device, set()) - {key})
            if others:
                return f"{device} (claim {others[0]})"
        return None

    def shared_with_others(self, devices: Iterable[str]) -> bool:
        """Did another scheduler allocate on any of these devices' pools lately?"""
        now = time.monotonic()
        return any(
            now - self.foreign.get(d.rsplit("/", 1)[0], -FOREIGN_WINDOW) < FOREIGN_WINDOW
            for d in devices
        )

    # --- out to the allocator ----------------------------------------------------------------
    def take_changes(self, nodes: Iterable[tuple[str, Mapping[str, str]]]) -> list[dict[str, Any]]:
        """What changed since last taken, with the labels of `nodes` the allocator lacks (only
        slices shared through a node selector read them)."""
        changes, self._pending = self._pending, []
        if self.shared_slices():
            for name, labels in nodes:
                if self._labels_sent.get(name) is not labels:
                    self._labels_sent[name] = labels
                    node = {"metadata": {"name": name, "labels": dict(labels)}}
                    changes.append({"op": "upsert", "kind": "Node", "object": node})
        return changes

    def snapshot(self) -> list[dict[str, Any]]:
        """Everything, for an allocator just started; what was pending is part of it."""
        self._pending = []
        self._labels_sent.clear()
        self._claims_sent = {
            c.key: c.resource_version for c in self.claims.by_key.values() if c.allocation
        }
        return [
            *({"op": "upsert", "kind": "DeviceClass", "object": o} for o in self.classes.values()),
            *({"op": "upsert", "kind": "ResourceSlice", "object": o} for o in self.slices.values()),
            *(
                {"op": "upsert", "kind": "ResourceClaim", "object": c.raw}
                for c in self.claims.by_key.values()
                if c.allocation
            ),
        ]

    def shared_slices(self) -> bool:
        return any(node == "" for node in self.slice_nodes.values())

    def nodes_with_devices(self) -> set[str] | None:
        """The nodes some slice names, or None when a slice is shared through a selector (every
        node may then have devices)."""
        if self.shared_slices():
            return None
        return set(self.slice_nodes.values())

    def device_usage(self) -> tuple[Counter[str], Counter[str]]:
        """Per node, the devices its own slices publish, and how many of those are allocated
        (the informer's claims and the allocations in flight)."""
        total: Counter[str] = Counter()
        pool_node: dict[str, str] = {}
        for name, node in self.slice_nodes.items():
            if node:
                total[node] += self.slice_devices.get(name, 0)
                spec = self.slices[name].get("spec") or {}
                pool = f"{spec.get('driver')}/{(spec.get('pool') or {}).get('name')}"
                pool_node[pool] = node
        used: Counter[str] = Counter()
        taken = set(self.holders)
        for entry in self.inflight.values():
            taken.update(exclusive_devices(entry.allocation))
        for device in taken:
            owner = pool_node.get(device.rsplit("/", 1)[0])
            if owner:
                used[owner] += 1
        return total, used

    def inflight_allocations(self) -> list[Mapping[str, Any]]:
        return [entry.allocation for entry in self.inflight.values()]


def exclusive_devices(allocation: Mapping[str, Any]) -> list[str]:
    """driver/pool/device of the allocation's devices that no other claim may hold (not
    admin access, not a share of a device allowing several allocations)."""
    results = (allocation.get("devices") or {}).get("results") or ()
    return [
        f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}"
        for r in results
        if isinstance(r, Mapping) and not r.get("adminAccess") and not r.get("shareID")
    ]
