"""NodeResourcesFit: every requested resource, plus one pod slot, within allocatable minus what
the pods already on the node (bound or assumed, whoever scheduled them) request."""

from __future__ import annotations

from ...resources import PODS
from ..context import CycleContext
from ..plugin import FilterPlugin, Inputs
from ..types import NodeInfo


class NodeResourcesFit(FilterPlugin):
    name = "NodeResourcesFit"
    inputs = Inputs(pod=("requests",), node=("allocatable",), placed=("requests",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        """Reports every shortfall, as kube-scheduler does."""
        requested = ctx.state.requested(node.name)
        reasons = []
        allocatable = node.allocatable
        if requested.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
            reasons.append("Too many pods")
        for name, amount in ctx.pod.requests.amounts.items():
            if amount and requested.get(name, 0) + amount > allocatable.get(name, 0):
                reasons.append(f"Insufficient {name}")
        return reasons or None

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        """The pod asks for more than the node has even when empty."""
        allocatable = node.allocatable
        return any(
            amount > allocatable.get(name, 0) for name, amount in ctx.pod.requests.amounts.items()
        )
