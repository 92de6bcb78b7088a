"""DeviceClasses that back extended resources (dynamic resource allocation, KEP-5004): a pod
requesting such a resource in its containers is satisfied by DRA in kube-scheduler, which
loadwise does not evaluate. Rather than guess (an "Insufficient" verdict where kube-scheduler
would allocate devices), loadwise refuses the pod naming the resource and the class.

A class backs `spec.extendedResourceName` when set, and always the implicit name
`deviceclass.resource.kubernetes.io/<class name>`. Only those names are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..framework.types import PodInfo
from .dynamic_resources.objects import DeviceObjects

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
PATH = "/apis/resource.k8s.io/v1/deviceclasses"


class DeviceClasses:
    def __init__(self, devices: DeviceObjects | None = None) -> None:
        """`devices`: the device allocator's copy, which gets every class too."""
        self.by_class: dict[str, str] = {}  # class name -> its explicit extendedResourceName
        self.devices = devices

    def on_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        if self.devices is not None:
            self.devices.on_class_event(event_type, raw)
        name = str((raw.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self.by_class.pop(name, None)
            return
        self.by_class[name] = str((raw.get("spec") or {}).get("extendedResourceName") or "")

    def relisted(self, names: set[str]) -> None:
        if self.devices is not None:
            self.devices.relisted_classes(names)
        for name in set(self.by_class) - names:
            del self.by_class[name]

    def refusal(self, pod: PodInfo) -> str | None:
        """Why loadwise cannot place `pod`, if it requests a DRA-backed extended resource."""
        if not self.by_class:
            return None
        for resource in pod.requests.amounts:
            if "/" not in resource:
                continue  # cpu, memory, pods, ephemeral-storage: never DRA-backed
            if resource.startswith(IMPLICIT_PREFIX):
                backing = resource.removeprefix(IMPLICIT_PREFIX)
                if backing not in self.by_class:
                    continue
            else:
                backing = next((c for c, r in self.by_class.items() if r == resource), "")
                if not backing:
                    continue
            return (
                f"pod requests {resource}, an extended resource backed by dynamic resource "
                f"allocation (DeviceClass {backing}), which loadwise does not evaluate (use the "
                "default scheduler for this pod)"
            )
        return None
