"""DeviceClasses that back extended resources (dynamic resource allocation, KEP-5004, on in
Kubernetes 1.37): a pod requesting such a resource in its containers (`example.com/gpu: 1`) is
given devices of the class, through a ResourceClaim the scheduler creates for it
(dynamic_resources/extended.py).

A class backs `spec.extendedResourceName` when set, and always the implicit name
`deviceclass.resource.kubernetes.io/<class name>` (the scheduler's ExtendedResourceCache). When
several classes name one extended resource, the newest backs it (the same creation time: the
first name); the cache's answer there depends on the order it saw the classes, this one not.
The resolved names go into the cluster state (`dra_backed`), which NodeResourcesFit and
DynamicResources read.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from .dynamic_resources.objects import DeviceObjects

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
PATH = "/apis/resource.k8s.io/v1/deviceclasses"


class DeviceClasses:
    def __init__(
        self, backed: MutableMapping[str, str], devices: DeviceObjects | None = None
    ) -> None:
        """`backed`: extended resource name -> DeviceClass, kept here for its readers.
        `devices`: the device allocator's copy, which gets every class too."""
        self.backed = backed
        self.devices = devices
        # class name -> (its explicit extendedResourceName, creationTimestamp as written)
        self.by_class: dict[str, tuple[str, str]] = {}

    def on_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        if self.devices is not None:
            self.devices.on_class_event(event_type, raw)
        meta = raw.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self.by_class.pop(name, None)
        else:
            explicit = str((raw.get("spec") or {}).get("extendedResourceName") or "")
            self.by_class[name] = (explicit, str(meta.get("creationTimestamp") or ""))
        self._resolve()

    def relisted(self, names: set[str]) -> None:
        if self.devices is not None:
            self.devices.relisted_classes(names)
        for name in set(self.by_class) - names:
            del self.by_class[name]
        self._resolve()

    def _resolve(self) -> None:
        backed: dict[str, str] = {IMPLICIT_PREFIX + name: name for name in self.by_class}
        newest: dict[str, tuple[str, str]] = {}  # explicit name -> (created, class)
        for name, (explicit, created) in self.by_class.items():
            if not explicit:
                continue
            best = newest.get(explicit)
            # RFC 3339 in UTC with one format: the strings order as the times do
            if best is None or created > best[0] or (created == best[0] and name < best[1]):
                newest[explicit] = (created, name)
        backed.update({explicit: name for explicit, (_, name) in newest.items()})
        if backed != self.backed:
            self.backed.clear()
            self.backed.update(backed)
