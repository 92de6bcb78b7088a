"""The scheduler's view of nodes and pods: slotted dataclasses parsed once from raw API objects.

The framework (filters, scorers, the score index) reads these and nothing mutable; the cluster
state (scheduler/state.py) holds them. Parsing never raises on odd objects: what cannot be
understood marks the node invalid or the pod unschedulable with a reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..resources import PodRequests, parse_resource_list, placed_requests, pod_requests
from .extended_resources import ContainerRequests, may_be_dra_backed, parse_container_requests
from .node_thresholds import parse_node_thresholds
from .pod_groups import PodGroupKey, pod_group_of
from .podaffinity import AffinityTerm, preferred_terms, required_terms
from .resource_claims import NO_CLAIMS, PodClaims, parse_pod_claims
from .selectors import (
    NodeSelectorTerm,
    RequiredNodeAffinity,
    parse_preferred_node_affinity,
    parse_required_node_affinity,
)
from .spread import SpreadConstraint, parse_constraints
from .storage import NO_VOLUMES, PodVolumes, parse_pod_volumes
from .taints import Taint, Toleration, parse_taints, parse_tolerations

HostPort = tuple[str, str, int]  # (hostIP, protocol, port)


@dataclass(frozen=True, slots=True)
class Owner:
    """The pod's controller (the ownerReference with controller: true)."""

    api_version: str
    kind: str
    name: str
    uid: str


_NO_AFFINITY = RequiredNodeAffinity((), None)

_TERMINAL = frozenset({"Succeeded", "Failed"})

# PodInfo fields read from a raw pod's metadata; every other one comes from its spec (whose
# changes bump metadata.generation) or, for placed_at, from its status. A watch event can thus
# be checked for changes a plugin reads without parsing the pod.
FROM_METADATA: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "labels": lambda meta: meta.get("labels") or {},
    "deleting": lambda meta: bool(meta.get("deletionTimestamp")),
    "namespace": lambda meta: meta.get("namespace", ""),
    "name": lambda meta: meta.get("name", ""),
    "uid": lambda meta: meta.get("uid", ""),
    "owner": lambda meta: controller_of(meta),
}


@dataclass(slots=True)
class NodeInfo:
    """A node as the filters and scorers need it; `valid` is False if its allocatable is garbage."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    ready: bool
    unschedulable: bool
    taints: tuple[Taint, ...] = ()
    valid: bool = True
    invalid_reason: str = ""
    # its own hot thresholds, percent by resource (node_thresholds.py), or why they are refused
    hot_thresholds: Mapping[str, float] = field(default_factory=dict)
    hot_thresholds_error: str = ""


@dataclass(slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    node_name: str
    scheduler_name: str
    priority: int
    created: float
    labels: Mapping[str, str]
    requests: PodRequests
    generation: int = 0
    deleting: bool = False
    assumed: bool = False
    bind_landed: bool = False  # assumed, and our Binding succeeded: only the watch is behind
    placed_at: float = 0.0  # wall-clock time we first knew it on its node
    invalid_reason: str = ""  # cannot be scheduled as written (bad quantities, unsupported)
    gated: bool = False  # spec.schedulingGates not yet removed: not ours to schedule yet
    tolerations: tuple[Toleration, ...] = ()
    node_affinity: RequiredNodeAffinity = _NO_AFFINITY
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    affinity_terms: tuple[AffinityTerm, ...] = ()
    anti_affinity_terms: tuple[AffinityTerm, ...] = ()
    preferred_affinity_terms: tuple[tuple[int, AffinityTerm], ...] = ()
    preferred_anti_affinity_terms: tuple[tuple[int, AffinityTerm], ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    # claims, inline CSI volumes and in-tree disks (the volume plugins'), of placed pods too
    volumes: PodVolumes = NO_VOLUMES
    owner: Owner | None = None
    # Preemption (framework/preemption.py): ours to schedule, and placed pods as victims.
    preempt_never: bool = False  # spec.preemptionPolicy: Never
    nominated_node: str = ""  # status.nominatedNodeName: room being made there for it
    start_time: str = ""  # status.startTime as written (RFC 3339, UTC): "" not started
    ready_at: float = 0.0  # when it first turned Ready (wall clock; 0: not yet, or unknown)
    preempted: bool = False  # the DisruptionTarget condition, reason PreemptionByScheduler
    # What of the status an in-place resize changes (allocated and actual resources, the
    # PodResizePending condition): a change re-reads a placed pod (its generation does not move).
    resize_key: tuple[Any, ...] = ()
    group: PodGroupKey | None = None  # the PodGroup it belongs to (framework/pod_groups.py)
    # it runs to completion (restartPolicy Never or OnFailure): its room comes back
    finishes: bool = False
    claims: PodClaims = NO_CLAIMS  # its ResourceClaims, pending pods only (resource_claims.py)
    # its containers' domain-qualified requests, pending pods asking some only: devices, when
    # a DeviceClass backs them (extended_resources.py)
    container_requests: tuple[ContainerRequests, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workload(self) -> str | None:
        """namespace/Kind/name of the pod's controller: pods of one workload use alike."""
        owner = self.owner
        return f"{self.namespace}/{owner.kind}/{owner.name}" if owner is not None else None


def parse_node(raw: Mapping[str, Any]) -> NodeInfo:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    node = NodeInfo(
        name=meta.get("name", ""),
        labels=meta.get("labels") or {},
        allocatable={},
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
    )
    if meta.get("annotations"):
        node.hot_thresholds, node.hot_thresholds_error = parse_node_thresholds(meta["annotations"])
    try:
        node.taints = parse_taints(spec.get("taints"))
        node.allocatable = parse_resource_list(status.get("allocatable") or status.get("capacity"))
    except (ValueError, TypeError, AttributeError) as exc:
        node.valid, node.invalid_reason = False, f"invalid allocatable: {exc}"
    if node.valid and not node.allocatable:
        node.valid, node.invalid_reason = False, "no allocatable resources reported"
    return node


def parse_pod(raw: Mapping[str, Any], placed: bool = False) -> PodInfo:
    """`placed`: the pod is on a node, so only what accounting and the plugins read of placed
    pods (Profile.placed_fields) is parsed; its own filters' inputs (tolerations, node
    affinity, spread, gates) stay empty. Start-up parses every pod in the cluster,
    and the default tolerations alone were a fifth of that."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    pod = PodInfo(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node_name=spec.get("nodeName") or "",
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        priority=_int(spec.get("priority")),
        created=0.0 if placed else _timestamp(meta.get("creationTimestamp")),  # queue order
        labels=meta.get("labels") or {},
        requests=PodRequests({}),
        generation=_int(meta.get("generation")),
        deleting=bool(meta.get("deletionTimestamp")),
        placed_at=true_since(status, "PodScheduled"),
        ready_at=true_since(status, "Ready"),
        owner=controller_of(meta),
        nominated_node=str(status.get("nominatedNodeName") or ""),
        start_time=str(status.get("startTime") or ""),
        group=pod_group_of(meta, spec),
        finishes=spec.get("restartPolicy") in ("Never", "OnFailure"),
    )
    if pod.deleting:  # the victim mark matters only once the pod is going
        pod.preempted = preempted_by_scheduler(status)
    try:
        if placed:  # a resize in flight: counted at the larger of spec and status
            pod.resize_key = resize_key(status)
            pod.requests = placed_requests(spec, status) if pod.resize_key else pod_requests(spec)
        else:
            pod.requests = pod_requests(spec)
    except (ValueError, TypeError, AttributeError) as exc:
        pod.invalid_reason = f"invalid resource requests: {exc}"
    try:
        _parse_placement(pod, spec, status, placed)
    except (ValueError, TypeError, AttributeError) as exc:
        pod.invalid_reason = f"invalid scheduling constraints: {exc}"
    return pod


def _parse_placement(
    pod: PodInfo, spec: Mapping[str, Any], status: Mapping[str, Any], placed: bool
) -> None:
    """The parts of a spec the filters read. Cheap when absent, as on most pods."""
    pod.host_ports = host_ports(spec)
    if spec.get("volumes"):
        pod.volumes = parse_pod_volumes(pod.name, spec)
    affinity = spec.get("affinity")
    if affinity:  # read of placed pods too: their terms act on the incoming pod
        namespace = pod.namespace
        pod.affinity_terms = required_terms(spec, "podAffinity", namespace)
        pod.anti_affinity_terms = required_terms(spec, "podAntiAffinity", namespace)
        pod.preferred_affinity_terms = preferred_terms(spec, "podAffinity", namespace)
        pod.preferred_anti_affinity_terms = preferred_terms(spec, "podAntiAffinity", namespace)
    if placed:
        return
    pod.gated = bool(spec.get("schedulingGates"))
    pod.preempt_never = spec.get("preemptionPolicy") == "Never"
    if affinity:
        pod.preferred_node_affinity = parse_preferred_node_affinity(spec)
    if affinity or spec.get("nodeSelector"):
        pod.node_affinity = parse_required_node_affinity(spec)
    if spec.get("tolerations"):
        pod.tolerations = parse_tolerations(spec.get("tolerations"))
    if spec.get("topologySpreadConstraints"):
        pod.spread = parse_constraints(spec, pod.labels)
    if spec.get("resourceClaims"):
        pod.claims = parse_pod_claims(pod.namespace, pod.name, spec, status)
    if any(may_be_dra_backed(name) for name in pod.requests.amounts):
        pod.container_requests = parse_container_requests(spec)


def controller_of(meta: Mapping[str, Any]) -> Owner | None:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return Owner(
                str(ref.get("apiVersion") or ""),
                str(ref.get("kind") or ""),
                str(ref.get("name") or ""),
                str(ref.get("uid") or ""),
            )
    return None


def host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    ports = []
    containers = list(spec.get("containers") or ())
    containers += [
        c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"
    ]
    for container in containers:
        for port in container.get("ports") or ():
            number = int(port.get("hostPort") or 0)
            if number > 0:
                ports.append(
                    (
                        str(port.get("hostIP") or "0.0.0.0"),
                        str(port.get("protocol") or "TCP"),
                        number,
                    )
                )
    return tuple(ports)


def preempted_by_scheduler(status: Mapping[str, Any]) -> bool:
    """The victim mark kube-scheduler's preemption writes before deleting a pod."""
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == "PreemptionByScheduler"
        for c in status.get("conditions") or ()
    )


def true_since(status: Mapping[str, Any], kind: str) -> float:
    """When the pod's condition `kind` turned True (PodScheduled: the API server recorded the
    binding; Ready: its containers run and pass their probes), else 0 (not, or unknown)."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            return _timestamp(stamp) if stamp else 0.0
    return 0.0


def resize_key(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """The status fields an in-place resize moves, hashable; () when none is set."""
    parts: list[Any] = []
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            if isinstance(cs, Mapping) and (cs.get("resources") or cs.get("allocatedResources")):
                parts.append(
                    (
                        cs.get("name"),
                        repr(cs.get("allocatedResources")),
                        repr((cs.get("resources") or {}).get("requests")),
                    )
                )
    if status.get("allocatedResources") or status.get("resources"):  # the pod-level sums
        parts.append((repr(status.get("allocatedResources")), repr(status.get("resources"))))
    for c in status.get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == "PodResizePending":
            parts.append(("PodResizePending", c.get("reason")))
    return tuple(parts)


def is_terminal(raw: Mapping[str, Any]) -> bool:
    return (raw.get("status") or {}).get("phase") in _TERMINAL


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _timestamp(value: Any) -> float:
    if not value:
        return time.time()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()
