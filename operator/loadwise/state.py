"""ClusterState: what the scheduler knows about nodes and pods, fed by watch events.

It is the scheduler cache of kube-scheduler in miniature: per-node requested resources of every
pod bound there (whoever bound it), plus pods we *assumed* onto a node before their bind landed
(Reserve). Every mutation is synchronous, so a scheduling cycle that never awaits always sees a
consistent picture. Raw API objects are parsed once into slotted dataclasses.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .resources import CPU, MEMORY, PODS, PodRequests, parse_resource_list, pod_requests

_TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class NodeInfo:
    """A node as the filters and scorers need it; `valid` is False if its allocatable is garbage."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    ready: bool
    unschedulable: bool
    valid: bool = True
    invalid_reason: str = ""


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
    resource_version: str = ""
    deleting: bool = False
    assumed: bool = False
    placed_at: float = 0.0  # wall-clock time we first knew it on its node
    invalid_reason: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class NodeLoad:
    """Requests of the pods on one node, kept incrementally."""

    requested: dict[str, int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)
    recent: deque[tuple[float, str]] = field(default_factory=deque)  # (placed_at, uid)


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
    try:
        node.allocatable = parse_resource_list(status.get("allocatable") or status.get("capacity"))
    except (ValueError, TypeError, AttributeError) as exc:
        node.valid, node.invalid_reason = False, f"invalid allocatable: {exc}"
    if node.valid and not node.allocatable:
        node.valid, node.invalid_reason = False, "no allocatable resources reported"
    return node


def parse_pod(raw: Mapping[str, Any]) -> PodInfo:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    pod = PodInfo(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node_name=spec.get("nodeName") or "",
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        priority=_int(spec.get("priority")),
        created=_timestamp(meta.get("creationTimestamp")),
        labels=meta.get("labels") or {},
        requests=PodRequests({}),
        resource_version=meta.get("resourceVersion", ""),
        deleting=bool(meta.get("deletionTimestamp")),
    )
    try:
        pod.requests = pod_requests(spec)
    except (ValueError, TypeError, AttributeError) as exc:
        pod.invalid_reason = f"invalid resource requests: {exc}"
    return pod


def is_terminal(raw: Mapping[str, Any]) -> bool:
    return (raw.get("status") or {}).get("phase") in _TERMINAL


class ClusterState:
    """Nodes, per-node pod accounting, and assumed pods."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}  # bound or assumed pods that hold resources
        self.loads: dict[str, NodeLoad] = {}
        self.generation = 0  # bumped on every change that could make a pod fit

    # --- nodes -------------------------------------------------------------------------------
    def upsert_node(self, raw: Mapping[str, Any]) -> NodeInfo:
        node = parse_node(raw)
        self.nodes[node.name] = node
        self.generation += 1
        return node

    def delete_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.generation += 1

    # --- pods that hold resources ------------------------------------------------------------
    def observe_bound(self, pod: PodInfo, terminal: bool) -> bool:
        """Record a pod the API shows on a node. Returns True if node capacity was freed."""
        current = self.pods.get(pod.uid)
        if terminal:
            return self.remove_pod(pod.uid)
        if current is not None and current.node_name == pod.node_name:
            current.assumed = False  # the bind landed: the assumed entry becomes the real one
            current.resource_version = pod.resource_version
            current.deleting = pod.deleting
            return False
        freed = self.remove_pod(pod.uid) if current is not None else False
        pod.placed_at = time.time()
        self._account(pod)
        return freed

    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Reserve: account the pod on the node now, before its bind lands."""
        pod.node_name = node_name
        pod.assumed = True
        pod.placed_at = time.time()
        self._account(pod)

    def forget(self, uid: str) -> None:
        """Unreserve: a bind failed; release what assume() took, if it is still assumed."""
        pod = self.pods.get(uid)
        if pod is not None and pod.assumed:
            self.remove_pod(uid)

    def remove_pod(self, uid: str) -> bool:
        pod = self.pods.pop(uid, None)
        if pod is None:
            return False
        load = self.loads.get(pod.node_name)
        if load is not None and uid in load.pods:
            load.pods.discard(uid)
            for name, amount in pod.requests.amounts.items():
                load.requested[name] = load.requested.get(name, 0) - amount
            load.requested[PODS] = load.requested.get(PODS, 0) - 1
        self.generation += 1
        return True

    def _account(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        load = self.loads.get(pod.node_name)
        if load is None:
            load = self.loads[pod.node_name] = NodeLoad()
        load.pods.add(pod.uid)
        for name, amount in pod.requests.amounts.items():
            load.requested[name] = load.requested.get(name, 0) + amount
        load.requested[PODS] = load.requested.get(PODS, 0) + 1
        load.recent.append((pod.placed_at, pod.uid))

    # --- reads -------------------------------------------------------------------------------
    def requested(self, node_name: str) -> Mapping[str, int]:
        load = self.loads.get(node_name)
        return load.requested if load is not None else {}

    def placed_since(self, node_name: str, since: float) -> Iterator[PodInfo]:
        """Pods placed on the node after `since` (wall clock): their usage is not in a sample
        taken at `since` yet. Older entries are dropped as they are passed."""
        load = self.loads.get(node_name)
        if load is None:
            return
        recent = load.recent
        while recent and recent[0][0] <= since:
            recent.popleft()
        for _, uid in recent:
            pod = self.pods.get(uid)
            if pod is not None and pod.node_name == node_name:
                yield pod

    def utilisation_by_requests(self, node: NodeInfo) -> tuple[float, float]:
        requested = self.requested(node.name)
        return (
            _ratio(requested.get(CPU, 0), node.allocatable.get(CPU, 0)),
            _ratio(requested.get(MEMORY, 0), node.allocatable.get(MEMORY, 0)),
        )


def _ratio(used: int, total: int) -> float:
    return used / total if total > 0 else 1.0


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
