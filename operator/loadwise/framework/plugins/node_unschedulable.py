"""NodeUnschedulable: cordoned nodes, unless the pod tolerates the unschedulable taint."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import FilterPlugin, Inputs
from ..taints import NO_SCHEDULE, UNSCHEDULABLE_TAINT_KEY, Taint, tolerated
from ..types import NodeInfo

_UNSCHEDULABLE_TAINT = Taint(UNSCHEDULABLE_TAINT_KEY, "", NO_SCHEDULE)


class NodeUnschedulable(FilterPlugin):
    name = "NodeUnschedulable"
    always_unresolvable = True
    inputs = Inputs(pod=("tolerations",), node=("unschedulable",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        if node.unschedulable and not tolerated(_UNSCHEDULABLE_TAINT, ctx.pod.tolerations):
            return ["node(s) were unschedulable"]
        return None
