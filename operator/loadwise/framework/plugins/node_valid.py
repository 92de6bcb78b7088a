"""Not a kube-scheduler plugin: a node whose allocatable cannot be parsed takes nothing."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import FilterPlugin, Inputs
from ..types import NodeInfo


class NodeValid(FilterPlugin):
    name = "NodeValid"
    always_unresolvable = True
    inputs = Inputs(node=("valid",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        return None if node.valid else ["node(s) had invalid allocatable"]
