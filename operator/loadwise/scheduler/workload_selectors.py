"""The selectors of Services and workload controllers, for kube-scheduler's system default
topology spreading (helper.DefaultSelector).

A pod without topologySpreadConstraints of its own is spread, as kube-scheduler does, among the
pods selected by the Services of its namespace that select it and by its controller (a
ReplicaSet, ReplicationController or StatefulSet). Only selectors are kept, not the objects: the
informers feed raw objects in through `on_*_event`, and their relists through `relisted_*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..framework.selectors import Requirement, Selector, parse_label_selector
from ..framework.types import Owner

LabelSet = tuple[tuple[str, str], ...]

# The controllers kube-scheduler reads a selector from: (apiVersion, kind) -> resource.
CONTROLLERS = {
    ("v1", "ReplicationController"): "replicationcontrollers",
    ("apps/v1", "ReplicaSet"): "replicasets",
    ("apps/v1", "StatefulSet"): "statefulsets",
}


def namespaced_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _label_set(raw: Any) -> LabelSet:
    return tuple(sorted((str(k), str(v)) for k, v in (raw or {}).items()))


class WorkloadSelectors:
    """Service selectors per namespace, and controller selectors by resource and namespace/name
    (kube-scheduler looks a controller up by name, as here)."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, LabelSet]] = {}  # namespace -> name -> selector
        # resource -> "namespace/name" -> selector; None: one that selects nothing (nil)
        self.controllers: dict[str, dict[str, Selector | None]] = {
            resource: {} for resource in CONTROLLERS.values()
        }

    # --- feeding -----------------------------------------------------------------------------
    def on_service_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        selector = _label_set((raw.get("spec") or {}).get("selector"))
        if event_type == "DELETED" or not selector:
            # A nil selector matches nothing, an empty one adds nothing: neither matters.
            in_namespace = self.services.get(namespace)
            if in_namespace is not None:
                in_namespace.pop(name, None)
                if not in_namespace:
                    del self.services[namespace]
            return
        self.services.setdefault(namespace, {})[name] = selector

    def relisted_services(self, keys: set[str]) -> None:
        for namespace in list(self.services):
            names = self.services[namespace]
            for name in [n for n in names if f"{namespace}/{n}" not in keys]:
                del names[name]
            if not names:
                del self.services[namespace]

    def on_controller_event(
        self, resource: str, event_type: str | None, raw: Mapping[str, Any]
    ) -> None:
        known = self.controllers[resource]
        key = namespaced_name(raw)
        if event_type == "DELETED":
            known.pop(key, None)
            return
        spec_selector = (raw.get("spec") or {}).get("selector")
        if resource == "replicationcontrollers":  # a plain map, as a Service's
            known[key] = Selector(_label_set(spec_selector), ())
        else:
            known[key] = parse_label_selector(spec_selector)

    def relisted_controllers(self, resource: str, keys: set[str]) -> None:
        known = self.controllers[resource]
        for key in [k for k in known if k not in keys]:
            del known[key]

    # --- reading -----------------------------------------------------------------------------
    def default_selector(
        self, namespace: str, labels: Mapping[str, str], owner: Owner | None
    ) -> Selector | None:
        """kube-scheduler's DefaultSelector: the selectors of the Services in the namespace that
        select the pod, merged with its controller's; None when that is empty (no spreading)."""
        merged: dict[str, str] = {}
        for selector in (self.services.get(namespace) or {}).values():
            if all(labels.get(k) == v for k, v in selector):
                merged.update(selector)
        expressions: tuple[Requirement, ...] = ()
        resource = CONTROLLERS.get((owner.api_version, owner.kind)) if owner else None
        controller = None
        if owner is not None and resource is not None:
            controller = self.controllers[resource].get(f"{namespace}/{owner.name}")
        # A controller not seen (yet), or with a nil selector, adds nothing (as kube-scheduler).
        if controller is not None and resource == "replicationcontrollers":
            merged.update(controller.match_labels)  # labels.Merge
        elif controller is not None:  # a label selector: its requirements are added
            expressions = (
                *(Requirement(k, "In", (v,)) for k, v in controller.match_labels),
                *controller.expressions,
            )
        if not merged and not expressions:
            return None
        return Selector(tuple(sorted(merged.items())), expressions)
