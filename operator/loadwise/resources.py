"""Resource quantities and pod requests, parsed once per object into plain integers.

CPU is held in millicores and everything else in base units (bytes, counts), so the hot path
compares ints. Parsing follows Kubernetes' quantity grammar; unparseable values raise ValueError
and callers decide (a node with garbage allocatable is unschedulable, never a crash).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity ("100m", "1.5Gi", "2e3") into a Decimal of base units."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}")
        return Decimal(str(value))
    text = str(value).strip()
    if not text:
        raise ValueError("empty quantity")
    try:
        if text[-2:] in _BINARY:
            return Decimal(text[:-2]) * _BINARY[text[-2:]]
        if text[-1:] in _DECIMAL and not text[-1:].isdigit():
            number = text[:-1]
            if number[-1:] in ("e", "E"):  # "1e" is not a quantity
                raise ValueError(f"invalid quantity {value!r}")
            return Decimal(number) * _DECIMAL[text[-1:]]
        result = Decimal(text)
    except (InvalidOperation, IndexError):
        raise ValueError(f"invalid quantity {value!r}") from None
    if not result.is_finite():
        raise ValueError(f"invalid quantity {value!r}")
    return result


@functools.lru_cache(maxsize=4096)  # a cluster repeats a few quantities in every pod
def to_amount(name: str, value: str | int | float) -> int:
    """Quantity as the integer unit we account in: millicores for cpu, base units otherwise.

    Rounds up like Kubernetes does (a request of 0.5m cpu counts as 1m).
    """
    quantity = parse_quantity(value)
    if name == CPU:
        quantity *= 1000
    return math.ceil(quantity)


def parse_resource_list(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """A ResourceList (name -> quantity) as integer amounts; raises ValueError on bad quantities."""
    if not raw:
        return {}
    return {name: to_amount(name, value) for name, value in raw.items()}


# kube-scheduler scores a container that requests no CPU or memory as if it requested these
# (DefaultMilliCPURequest, DefaultMemoryRequest): a pod without requests is never free, so
# balance and the placement estimate still see the pods piling onto one node.
NONZERO_CPU = 100
NONZERO_MEMORY = 200 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PodRequests:
    """Effective requests of a pod, as kube-scheduler computes them for fitting, and its CPU and
    memory for scoring (`nonzero`: a missing container request counts as the defaults).

    `placed`: the non-zero CPU and memory kube-scheduler's cache counts for the pod once it is
    on a node (NodeInfo's NonZeroRequested). It equals `nonzero` except for a pod with
    pod-level requests, where only a resource missing from its requests takes the default."""

    amounts: Mapping[str, int]
    nonzero: tuple[int, int] = (NONZERO_CPU, NONZERO_MEMORY)  # (cpu millicores, memory bytes)
    placed: tuple[int, int] | None = None  # None: as `nonzero`

    def get(self, name: str) -> int:
        return self.amounts.get(name, 0)

    @property
    def placed_nonzero(self) -> tuple[int, int]:
        return self.nonzero if self.placed is None else self.placed

    def __hash__(self) -> int:  # pods of one shape share a score-index heap
        return hash((frozenset(self.amounts.items()), self.nonzero, self.placed))


def pod_requests(spec: Mapping[str, Any]) -> PodRequests:
    """Effective pod requests, as the pinned Kubernetes computes them (component-helpers'
    PodRequests): max(sum of app containers + sidecars, each init container's peak); then
    pod-level requests (`spec.resources.requests`, KEP-2837) replace that for the resources
    they name (cpu, memory, hugepages-*); then pod overhead is added. Sidecars are init
    containers with restartPolicy Always: they keep running, so they add to every later init
    container and to the app containers.

    Pods of one workload repeat one shape: the result is cached by the resources alone (start-up
    parses every pod in the cluster), and shared, so it is never mutated.
    """
    try:
        key = (
            _shape(spec.get("containers")),
            _shape(spec.get("initContainers")),
            tuple((spec.get("overhead") or {}).items()),
            tuple(((spec.get("resources") or {}).get("requests") or {}).items()),
        )
        hash(key)
    except (TypeError, AttributeError):  # odd values: computed (and refused) the long way
        return _pod_requests(spec)
    cached = _BY_SHAPE.get(key)
    if cached is None:
        cached = _pod_requests(spec)
        if len(_BY_SHAPE) >= _SHAPES_KEPT:
            _BY_SHAPE.clear()
        _BY_SHAPE[key] = cached
    return cached


_SHAPES_KEPT = 4096
_BY_SHAPE: dict[tuple[Any, ...], PodRequests] = {}


def _shape(containers: Any) -> tuple[Any, ...]:
    """What of a container list the requests depend on, hashable."""
    shape = []
    for container in containers or ():
        resources = container.get("resources") or {}
        shape.append(
            (
                container.get("restartPolicy"),
                tuple((resources.get("requests") or {}).items()),
                tuple((resources.get("limits") or {}).items()),
            )
        )
    return tuple(shape)


_DEFAULTS = {CPU: NONZERO_CPU, MEMORY: NONZERO_MEMORY}


def _pod_requests(spec: Mapping[str, Any]) -> PodRequests:
    pod_level = pod_level_requests(spec)
    total = _effective(spec, {}, pod_level)
    if pod_level is None:  # the usual case: both figures take the defaults for what is missing
        scored = _effective(spec, _DEFAULTS, None) if _misses_requests(spec) else total
        return PodRequests(total, (scored.get(CPU, 0), scored.get(MEMORY, 0)))
    # NodeResources' scoring: every container missing a request takes the defaults, then the
    # pod-level requests replace the sum (resource_allocation.go calculatePodResourceRequest).
    scored = _effective(spec, _DEFAULTS, pod_level)
    # The cache: only a resource missing from the pod's requests altogether takes its default
    # (framework/types.go getNonMissingContainerRequests).
    missing = {name: amount for name, amount in _DEFAULTS.items() if name not in total}
    placed = _effective(spec, missing, pod_level) if missing else total
    return PodRequests(
        total,
        (scored.get(CPU, 0), scored.get(MEMORY, 0)),
        (placed.get(CPU, 0), placed.get(MEMORY, 0)),
    )


def placed_requests(spec: Mapping[str, Any], status: Mapping[str, Any]) -> PodRequests:
    """A placed pod's requests as the scheduler's cache counts them in Kubernetes 1.37
    (PodRequests with UseStatusResources, InPlacePodLevelResourcesVerticalScaling on): while an
    in-place resize (KEP-1287) is pending or in progress, the larger of the spec's aggregate and
    what the kubelet allocated and actuated (the pod-level status maps when the kubelet fills
    them, else each container's status), or only the latter two while the resize is
    infeasible; pod-level requests likewise against the pod's status. Without such status
    fields this is `pod_requests(spec)`."""
    if not _has_status_resources(status):
        return pod_requests(spec)
    pod_level = pod_level_requests(spec)
    total = _with_status(spec, status, {}, pod_level)
    if pod_level is None:
        scored = _with_status(spec, status, _DEFAULTS, None) if _misses_requests(spec) else total
        return PodRequests(total, (scored.get(CPU, 0), scored.get(MEMORY, 0)))
    scored = _with_status(spec, status, _DEFAULTS, pod_level)
    missing = {name: amount for name, amount in _DEFAULTS.items() if name not in total}
    placed = _with_status(spec, status, missing, pod_level) if missing else total
    return PodRequests(
        total,
        (scored.get(CPU, 0), scored.get(MEMORY, 0)),
        (placed.get(CPU, 0), placed.get(MEMORY, 0)),
    )


def _has_status_resources(status: Mapping[str, Any]) -> bool:
    if status.get("allocatedResources") or status.get("resources"):
        return True
    return any(
        isinstance(cs, Mapping) and (cs.get("allocatedResources") or cs.get("resources"))
        for key in ("containerStatuses", "initContainerStatuses")
        for cs in status.get(key) or ()
    )


def _with_status(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    defaults: Mapping[str, int],
    pod_level: Mapping[str, int] | None,
) -> dict[str, int]:
    infeasible = any(
        c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    )
    statuses = {
        cs.get("name"): cs
        for key in ("containerStatuses", "initContainerStatuses")
        for cs in status.get(key) or ()
        if isinstance(cs, Mapping)
    }

    def allocated_of(container: Mapping[str, Any]) -> Mapping[str, int] | None:
        cs = statuses.get(container.get("name"))
        if cs is not None and cs.get("allocatedResources") is not None:
            return parse_resource_list(cs.get("allocatedResources"))
        return None if infeasible else _with_limits(container.get("resources") or {})

    def actuated_of(container: Mapping[str, Any]) -> Mapping[str, int] | None:
        cs = statuses.get(container.get("name"))
        actual = ((cs or {}).get("resources") or {}).get("requests")
        if actual is not None:
            return parse_resource_list(actual)
        return allocated_of(container)

    spec_total = _aggregate(spec, defaults, lambda c: _with_limits(c.get("resources") or {}))
    pod_allocated = status.get("allocatedResources")
    pod_actual = (status.get("resources") or {}).get("requests")
    if pod_allocated is not None and pod_actual is not None:  # the kubelet's pod-level sums
        allocated, actuated = parse_resource_list(pod_allocated), parse_resource_list(pod_actual)
    else:
        allocated = _aggregate(spec, defaults, allocated_of)
        actuated = _aggregate(spec, defaults, actuated_of)
    total = {} if infeasible else dict(spec_total)
    _max(total, actuated)
    _max(total, allocated)
    if pod_level:
        effective = {} if infeasible else dict(pod_level)
        pod_status = status.get("resources")
        if pod_status is not None:
            _max(effective, parse_resource_list(pod_status.get("requests")))
            _max(effective, parse_resource_list(status.get("allocatedResources")))
        else:
            effective = dict(pod_level)
        total.update(
            {n: a for n, a in effective.items() if n in (CPU, MEMORY) or n.startswith("hugepages-")}
        )
    _add(total, parse_resource_list(spec.get("overhead")))
    return total


def _aggregate(
    spec: Mapping[str, Any],
    defaults: Mapping[str, int],
    requests_of: Callable[[Mapping[str, Any]], Mapping[str, int] | None],
) -> dict[str, int]:
    """Containers plus sidecars, against each init container's peak, with `requests_of`
    giving each container's requests (None: none) and `defaults` filling what is missing."""
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _add(total, _defaulted(requests_of(container), defaults))
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = _defaulted(requests_of(container), defaults)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            peak = dict(sidecars)
            _add(peak, requests)
            _max(init_peak, peak)
    _max(total, init_peak)
    return total


def _defaulted(requests: Mapping[str, int] | None, defaults: Mapping[str, int]) -> dict[str, int]:
    result = dict(requests or {})
    for name, amount in defaults.items():
        result.setdefault(name, amount)
    return result


def _with_limits(resources: Mapping[str, Any]) -> dict[str, int]:
    requests = parse_resource_list(resources.get("requests"))
    for name, amount in parse_resource_list(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def pod_level_requests(spec: Mapping[str, Any]) -> dict[str, int] | None:
    """The pod-level requests kube-scheduler honours (IsPodLevelRequestsSet: cpu, memory and
    hugepages-*), or None when the pod sets none of them."""
    raw = (spec.get("resources") or {}).get("requests") or {}
    supported = {
        name: to_amount(name, value)
        for name, value in raw.items()
        if name in (CPU, MEMORY) or str(name).startswith("hugepages-")
    }
    return supported or None


def _misses_requests(spec: Mapping[str, Any]) -> bool:
    """Does a container lack a CPU or memory request (or limit)? Rare in production, so the
    second pass for the scoring requests is usually skipped."""
    for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
        resources = container.get("resources") or {}
        for name in (CPU, MEMORY):
            if name not in (resources.get("requests") or {}) and name not in (
                resources.get("limits") or {}
            ):
                return True
    return False


def _effective(
    spec: Mapping[str, Any], defaults: Mapping[str, int], pod_level: Mapping[str, int] | None
) -> dict[str, int]:
    """Containers' aggregate (a container missing a request in `defaults` takes it from
    there), replaced by `pod_level` where it names a resource, plus overhead."""
    total = _aggregate(spec, defaults, lambda c: _with_limits(c.get("resources") or {}))
    if pod_level:
        total.update(pod_level)
    _add(total, parse_resource_list(spec.get("overhead")))
    return total


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount
