"""PodTopologySpread: DoNotSchedule constraints filter; ScheduleAnyway ones are a preference
(kube-scheduler's weight 2). Both count matching pods per domain, so they depend on other
pods and never sign a pod they apply to."""

from __future__ import annotations

from collections.abc import Sequence

from .. import spread
from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, ScorePlugin, Signature
from ..scoring import SPREAD_WEIGHT, reverse_normalize
from ..types import NodeInfo, PodInfo

_INPUTS = Inputs(
    pod=("spread", "labels", "namespace", "node_affinity", "tolerations"),
    node=("labels", "taints"),
    placed=("labels", "namespace", "deleting"),
)


class PodTopologySpread(FilterPlugin):
    name = "PodTopologySpread"
    inputs = _INPUTS
    node_local = False
    helped_by_placement = True

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if any(c.hard for c in ctx.pod.spread) else ()

    def waits_for_pods(self, pod: PodInfo) -> bool:
        return any(c.hard for c in pod.spread)

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        counts = ctx.hard_spread
        if counts is None:
            return None
        reason = spread.filter_node(ctx.pod, node, counts)
        return [reason] if reason else None


class SpreadPreference(ScorePlugin):
    name = "PodTopologySpreadScore"
    inputs = _INPUTS
    node_local = False
    weight = SPREAD_WEIGHT

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if any(not c.hard for c in ctx.pod.spread) else ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        soft = ctx.soft_spread
        if soft is None:
            return None
        return reverse_normalize([spread.soft_score(n, soft) for n in nodes])
