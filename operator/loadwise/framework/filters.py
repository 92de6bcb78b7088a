"""Filter plugins, in kube-scheduler's order; each returns why a node cannot take the pod.

A node stops at its first failing filter, as in kube-scheduler, so the FailedScheduling summary
counts one reason per node (NodeResourcesFit may report several resources at once). Reasons use
kube-scheduler's wording.
"""

from __future__ import annotations

from collections.abc import Callable

from ..resources import PODS
from . import podaffinity, spread
from .context import CycleContext
from .taints import NO_SCHEDULE, UNSCHEDULABLE_TAINT_KEY, Taint, first_untolerated, tolerated
from .types import NodeInfo

Filter = Callable[[CycleContext, NodeInfo], list[str] | None]

_UNSCHEDULABLE_TAINT = Taint(UNSCHEDULABLE_TAINT_KEY, "", NO_SCHEDULE)


def node_valid(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    return None if node.valid else ["node(s) had invalid allocatable"]


def node_unschedulable(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    """Cordoned nodes, unless the pod tolerates the unschedulable taint."""
    if node.unschedulable and not tolerated(_UNSCHEDULABLE_TAINT, ctx.pod.tolerations):
        return ["node(s) were unschedulable"]
    return None


def node_ready(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    """Not a kube-scheduler plugin (it relies on the not-ready taint); loadwise is stricter."""
    return None if node.ready else ["node(s) were not ready"]


def taint_toleration(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    taint = first_untolerated(node.taints, ctx.pod.tolerations)
    if taint is None:
        return None
    return [f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"]


def node_affinity(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    if ctx.pod.node_affinity.matches(node.name, node.labels):
        return None
    return ["node(s) didn't match Pod's node affinity/selector"]


def node_ports(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    wanted = ctx.pod.host_ports
    if not wanted:
        return None
    used = ctx.state.used_ports(node.name)
    for ip, protocol, port in wanted:
        for (used_ip, used_protocol, used_port), count in used.items():
            if (
                count > 0
                and used_protocol == protocol
                and used_port == port
                and (ip == "0.0.0.0" or used_ip in ("0.0.0.0", ip))
            ):
                return ["node(s) didn't have free ports for the requested pod ports"]
    return None


def resources_fit(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    """NodeResourcesFit: every requested resource, plus one pod slot, within allocatable minus
    what the pods already on the node (bound or assumed) request. Reports every shortfall."""
    requested = ctx.state.requested(node.name)
    reasons = []
    allocatable = node.allocatable
    if requested.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
        reasons.append("Too many pods")
    for name, amount in ctx.pod.requests.amounts.items():
        if amount and requested.get(name, 0) + amount > allocatable.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons or None


def topology_spread(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    counts = ctx.hard_spread
    if counts is None:
        return None
    reason = spread.filter_node(ctx.pod, node, counts)
    return [reason] if reason else None


def inter_pod_affinity(ctx: CycleContext, node: NodeInfo) -> list[str] | None:
    counts = ctx.affinity
    if counts is None:
        return None
    reason = podaffinity.filter_node(ctx.pod, node, counts, ctx.state.namespaces)
    return [reason] if reason else None


DEFAULT_FILTERS: tuple[Filter, ...] = (
    node_valid,
    node_unschedulable,
    node_ready,
    taint_toleration,
    node_affinity,
    node_ports,
    resources_fit,
    topology_spread,
    inter_pod_affinity,
)
