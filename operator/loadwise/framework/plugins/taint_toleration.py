"""TaintToleration: NoSchedule and NoExecute taints must be tolerated; untolerated
PreferNoSchedule taints are a preference (kube-scheduler's weight 3)."""

from __future__ import annotations

from collections.abc import Sequence

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, ScorePlugin, Signature
from ..scoring import TAINT_WEIGHT, reverse_normalize
from ..taints import PREFER_NO_SCHEDULE, first_untolerated
from ..types import NodeInfo

_PREFER = frozenset({PREFER_NO_SCHEDULE})


class TaintToleration(FilterPlugin):
    name = "TaintToleration"
    always_unresolvable = True
    inputs = Inputs(pod=("tolerations",), node=("taints",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        taint = first_untolerated(node.taints, ctx.pod.tolerations)
        if taint is None:
            return None
        return [f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"]


class PreferNoSchedule(ScorePlugin):
    name = "TaintTolerationScore"
    inputs = Inputs(pod=("tolerations",), node=("taints",))
    node_local = False  # counts are normalised across the feasible nodes
    weight = TAINT_WEIGHT

    def sign(self, ctx: CycleContext) -> Signature:
        view, tolerations = ctx.state, ctx.pod.tolerations
        for name in view.prefer_no_schedule:
            node = view.nodes.get(name)
            if node is not None and first_untolerated(node.taints, tolerations, _PREFER):
                return UNSIGNABLE
        return ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        tolerations = ctx.pod.tolerations
        counts = [
            sum(
                1
                for t in node.taints
                if t.effect == PREFER_NO_SCHEDULE and first_untolerated((t,), tolerations, _PREFER)
            )
            for node in nodes
        ]
        return reverse_normalize([float(c) for c in counts]) if any(counts) else None
