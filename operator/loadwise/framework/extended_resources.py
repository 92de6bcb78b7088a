"""Extended resources a DeviceClass backs (KEP-5004): which of a pod's containers ask for which,
and the device requests kube-scheduler writes into the claim it creates for them
(`createRequestsAndMappings`, plugins/dynamicresources/extendeddynamicresources.go, v1.37.2),
request names included, since the kubelet finds each container's devices by them.

One request per container and resource, named `container-<i>-request-<j>` (i: the container's
index among init then app containers; j: the resource's index among the container's sorted
request names), asking `count` devices of the class. An init container that is not a sidecar
reuses the devices of the long-lived containers after it before asking its own, and of all such
init containers only the largest request is kept (they run one after another).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..resources import parse_quantity

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """A container's requests of resources with a domain (`example.com/gpu`), whole numbers
    only (others are never devices), each with its index among all its request names."""

    index: int  # among init containers, then app containers
    name: str
    short_lived: bool  # an init container that is not a sidecar
    requests: tuple[tuple[str, int, int], ...]  # (resource, count, index among sorted names)


def may_be_dra_backed(name: str) -> bool:
    """kube-scheduler's IsDRAExtendedResourceName, for names that could be: a domain-qualified
    name outside kubernetes.io, or a class's implicit name."""
    return "/" in name and ("kubernetes.io/" not in name or name.startswith(IMPLICIT_PREFIX))


def parse_container_requests(spec: Mapping[str, Any]) -> tuple[ContainerRequests, ...]:
    """Every container's domain-qualified requests (pending pods that have some only)."""
    found = []
    inits = list(spec.get("initContainers") or ())
    for index, container in enumerate([*inits, *(spec.get("containers") or ())]):
        if not isinstance(container, Mapping):
            continue
        requests = (container.get("resources") or {}).get("requests") or {}
        if not isinstance(requests, Mapping):
            continue
        names = sorted(str(n) for n in requests)
        mine = []
        for position, name in enumerate(names):
            if not may_be_dra_backed(name):
                continue
            try:
                amount = parse_quantity(requests[name])
            except (ValueError, TypeError):
                continue
            if amount == amount.to_integral_value() and amount > 0:
                mine.append((name, int(amount), position))
        short_lived = index < len(inits) and container.get("restartPolicy") != "Always"
        found.append(ContainerRequests(index, str(container.get("name") or ""), short_lived,
                                       tuple(mine)))  # fmt: skip
    return tuple(c for c in found if c.requests) if any(c.requests for c in found) else ()


def requests_and_mappings(
    containers: Sequence[ContainerRequests], needed: Sequence[str], classes: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The claim's `spec.devices.requests` for the resources `needed` on a node, and the pod's
    `status.extendedResourceClaimStatus.requestMappings`."""
    by_index = {c.index: c for c in containers}
    slots = max(by_index, default=-1) + 1
    requests: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(needed):
        cls = classes.get(resource)
        if cls is None:
            continue
        long_lived: list[dict[str, Any] | None] = [None] * slots
        long_maps: list[dict[str, str]] = []
        for c in containers:
            if not c.short_lived:
                long_lived[c.index], maps = _one(c, resource, cls, ())
                long_maps += maps
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_maps: list[dict[str, str]] = []
        for c in containers:
            if c.short_lived:
                request, maps = _one(c, resource, cls, long_lived[c.index :])
                if request is not None:
                    short_names.add(request["name"])
                    if largest is None or _count(largest) < _count(request):
                        largest = request
                short_maps += maps
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest["name"])
            for mapping in short_maps:
                if mapping["requestName"] in short_names:
                    mapping["requestName"] = largest["name"]
        if largest is not None:
            requests.append(largest)
        requests += [r for r in long_lived if r is not None]
        mappings += long_maps + short_maps
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


def _one(
    container: ContainerRequests,
    resource: str,
    cls: str,
    reusable: Sequence[dict[str, Any] | None],
) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    """createResourceRequestAndMappings: the container's own request, if it needs one."""
    entry = next((e for e in container.requests if e[0] == resource), None)
    if entry is None:
        return None, []
    _, wanted, position = entry
    mappings = []
    total = 0
    for request in reusable:
        if request is not None:
            total += _count(request)
            mappings.append(_mapping(container, resource, request["name"]))
            if total >= wanted:
                return None, mappings
    name = f"container-{container.index}-request-{position}"
    request = {
        "name": name,
        "exactly": {
            "deviceClassName": cls,
            "allocationMode": "ExactCount",
            "count": wanted - total,
        },
    }
    mappings.append(_mapping(container, resource, name))
    return request, mappings


def _count(request: Mapping[str, Any]) -> int:
    return int(request["exactly"]["count"])


def _mapping(container: ContainerRequests, resource: str, request: str) -> dict[str, str]:
    return {"containerName": container.name, "resourceName": resource, "requestName": request}
