"""RebalanceCoolDown: a workload whose pod rebalancing evicted from a node stays off that node
for the policy's coolDownSeconds, so a replacement never lands back where it was moved from
(the descheduler's LowNodeUtilization evicts by usage while kube-scheduler re-places by
requests, and pods go back and forth: descheduler #225, #994).

Not node-local: it reads the cool-downs beside the pod's controller, not a field of the pod.
A pod with none signs like every other; one with a cool-down leaves the batching path.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ..types import NodeInfo

REASON = "node(s) had a pod of this workload moved off them by rebalancing (cool-down)"


def cooling(ctx: CycleContext) -> Mapping[str, float]:
    """The nodes the pod's workload is kept off now, each with until when."""
    return ctx.prefiltered(_cooling)


def _cooling(ctx: CycleContext) -> Mapping[str, float]:
    owner = ctx.pod.owner
    moved = ctx.state.moved_off.get(owner.uid) if owner is not None else None
    if not moved:
        return {}
    return {node: until for node, until in moved.items() if until > ctx.now}


class RebalanceCoolDown(FilterPlugin):
    name = "RebalanceCoolDown"
    always_unresolvable = True  # preemption cannot shorten a cool-down
    inputs = Inputs(pod=("owner",))
    node_local = False

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if cooling(ctx) else ()

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        return [REASON] if node.name in cooling(ctx) else None
