"""Filter plugins: each says why a node cannot take a pod, or None when it can.

Reasons use kube-scheduler's wording so FailedScheduling summaries read the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..resources import PODS
from ..state import NodeInfo, PodInfo

Filter = Callable[[PodInfo, NodeInfo, Mapping[str, int]], list[str] | None]


def node_valid(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]) -> list[str] | None:
    return None if node.valid else ["node(s) had invalid allocatable"]


def node_ready(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]) -> list[str] | None:
    return None if node.ready else ["node(s) were not ready"]


def node_schedulable(
    pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]
) -> list[str] | None:
    return ["node(s) were unschedulable"] if node.unschedulable else None


def resources_fit(pod: PodInfo, node: NodeInfo, requested: Mapping[str, int]) -> list[str] | None:
    """NodeResourcesFit: every requested resource, plus one pod slot, within allocatable minus
    what the pods already on the node (bound or assumed) request. Reports every shortfall."""
    reasons = []
    allocatable = node.allocatable
    if requested.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
        reasons.append("Too many pods")
    for name, amount in pod.requests.amounts.items():
        if amount and requested.get(name, 0) + amount > allocatable.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons or None


DEFAULT_FILTERS: tuple[Filter, ...] = (node_valid, node_ready, node_schedulable, resources_fit)
