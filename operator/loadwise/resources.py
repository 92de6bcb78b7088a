"""Resource quantities and pod requests, parsed once per object into plain integers.

CPU is held in millicores and everything else in base units (bytes, counts), so the hot path
compares ints. Parsing follows Kubernetes' quantity grammar; unparseable values raise ValueError
and callers decide (a node with garbage allocatable is unschedulable, never a crash).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
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
    memory for scoring (`nonzero`: a missing container request counts as the defaults)."""

    amounts: Mapping[str, int]
    nonzero: tuple[int, int] = (NONZERO_CPU, NONZERO_MEMORY)  # (cpu millicores, memory bytes)

    def get(self, name: str) -> int:
        return self.amounts.get(name, 0)

    def __hash__(self) -> int:  # pods of one shape share a score-index heap
        return hash((frozenset(self.amounts.items()), self.nonzero))


def pod_requests(spec: Mapping[str, Any]) -> PodRequests:
    """Effective pod requests: max(sum of app containers + sidecars, each init container's peak),
    plus pod overhead. Sidecars are init containers with restartPolicy Always: they keep running,
    so they add to every later init container and to the app containers.

    Pods of one workload repeat one shape: the result is cached by the resources alone (start-up
    parses every pod in the cluster), and shared, so it is never mutated.
    """
    try:
        key = (
            _shape(spec.get("containers")),
            _shape(spec.get("initContainers")),
            tuple((spec.get("overhead") or {}).items()),
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


def _pod_requests(spec: Mapping[str, Any]) -> PodRequests:
    total = _effective(spec, nonzero=False)
    scored = _effective(spec, nonzero=True) if _misses_requests(spec) else total
    return PodRequests(total, (scored.get(CPU, 0), scored.get(MEMORY, 0)))


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


def _effective(spec: Mapping[str, Any], nonzero: bool) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _add(total, _container_requests(container, nonzero))
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container, nonzero)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            peak = dict(sidecars)
            _add(peak, requests)
            _max(init_peak, peak)
    _add(total, sidecars)
    _max(total, init_peak)
    _add(total, parse_resource_list(spec.get("overhead")))
    return total


def _container_requests(container: Mapping[str, Any], nonzero: bool = False) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = parse_resource_list(resources.get("requests"))
    # As in the API server's defaulting: a limit without a request makes the request equal it.
    for name, amount in parse_resource_list(resources.get("limits")).items():
        requests.setdefault(name, amount)
    if nonzero:  # kube-scheduler's NonMissingContainerRequests: only a missing request
        requests.setdefault(CPU, NONZERO_CPU)
        requests.setdefault(MEMORY, NONZERO_MEMORY)
    return requests


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount
