"""Not a kube-scheduler plugin (it relies on the not-ready taint); loadwise is stricter."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import FilterPlugin, Inputs
from ..types import NodeInfo


class NodeReady(FilterPlugin):
    name = "NodeReady"
    always_unresolvable = True
    inputs = Inputs(node=("ready",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        return None if node.ready else ["node(s) were not ready"]
