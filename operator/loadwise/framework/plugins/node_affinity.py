"""NodeAffinity: nodeSelector and required node affinity; preferred node affinity is a
preference (kube-scheduler's weight 2)."""

from __future__ import annotations

from collections.abc import Sequence

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, ScorePlugin, Signature
from ..scoring import NODE_AFFINITY_WEIGHT, normalize
from ..types import NodeInfo


class NodeAffinity(FilterPlugin):
    name = "NodeAffinity"
    always_unresolvable = True
    inputs = Inputs(pod=("node_affinity",), node=("labels",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        if ctx.pod.node_affinity.matches(node.name, node.labels):
            return None
        return ["node(s) didn't match Pod's node affinity/selector"]


class PreferredNodeAffinity(ScorePlugin):
    name = "NodeAffinityScore"
    inputs = Inputs(pod=("preferred_node_affinity",), node=("labels",))
    node_local = False  # normalised across the feasible nodes
    weight = NODE_AFFINITY_WEIGHT

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if ctx.pod.preferred_node_affinity else ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        preferred = ctx.pod.preferred_node_affinity
        if not preferred:
            return None
        sums = [
            float(sum(w for w, term in preferred if term.matches(n.name, n.labels))) for n in nodes
        ]
        return normalize(sums)
