"""NodeResourcesFit: every requested resource, plus one pod slot, within allocatable minus what
the pods already on the node (bound or assumed, whoever scheduled them) request.

An extended resource a DeviceClass backs is left to DynamicResources on a node whose
allocatable does not list it (kube-scheduler's shouldDelegateResourceToDRA): devices are
allocated for it there. Which names are backed is part of the pod's signature, so a verdict
the score index kept is never reused once a class appears or goes."""

from __future__ import annotations

from ...resources import PODS
from ..context import CycleContext
from ..plugin import FilterPlugin, Inputs, Signature
from ..types import NodeInfo


class NodeResourcesFit(FilterPlugin):
    name = "NodeResourcesFit"
    inputs = Inputs(pod=("requests",), node=("allocatable",), placed=("requests",))
    node_local = True

    def sign(self, ctx: CycleContext) -> Signature:
        requests = ctx.pod.requests
        backed = ctx.state.dra_backed
        if not backed:
            return (requests,)
        return (requests, tuple(sorted(n for n in requests.amounts if n in backed)))

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        """Reports every shortfall, as kube-scheduler does."""
        requested = ctx.state.requested(node.name)
        reasons = []
        allocatable = node.allocatable
        if requested.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
            reasons.append("Too many pods")
        for name, amount in ctx.pod.requests.amounts.items():
            if amount and requested.get(name, 0) + amount > allocatable.get(name, 0):
                if not allocatable.get(name) and name in ctx.state.dra_backed:
                    continue  # devices, allocated by DynamicResources
                reasons.append(f"Insufficient {name}")
        return reasons or None

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        """The pod asks for more than the node has even when empty."""
        allocatable = node.allocatable
        backed = ctx.state.dra_backed
        return any(
            amount > allocatable.get(name, 0) and not (name in backed and not allocatable.get(name))
            for name, amount in ctx.pod.requests.amounts.items()
        )
