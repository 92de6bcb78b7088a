"""PodTopologySpread: DoNotSchedule constraints filter; ScheduleAnyway ones, the pod's own or
kube-scheduler's system defaults, are a preference (kube-scheduler's weight 2). Both count
matching pods per domain, so they depend on other pods and never sign a pod they apply to."""

from __future__ import annotations

from collections.abc import Sequence

from .. import spread
from ..context import CycleContext
from ..plugin import SPREAD_BY_DOMAIN, UNSIGNABLE, FilterPlugin, Inputs, ScorePlugin, Signature
from ..scoring import SPREAD_WEIGHT
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

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        return reasons == [spread.ERR_MISSING_LABEL]  # no pod removed adds the label


class SpreadPreference(ScorePlugin):
    """ScheduleAnyway spreading, scored as kube-scheduler scores it.

    A pod without constraints of its own is spread over the pods its Services and controller
    (`owner`) select, so the pod's owner, labels and namespace are inputs; a pod spread either
    way is UNSIGNABLE (its score depends on other pods). Placed pods are counted by selector,
    never by owner. Services and controllers themselves requeue nothing: a ScheduleAnyway
    constraint never filters, so no change of theirs can make a rejected pod fit; the next cycle
    reads them."""

    fast_path = SPREAD_BY_DOMAIN

    name = "PodTopologySpreadScore"
    inputs = Inputs(pod=(*_INPUTS.pod, "owner"), node=_INPUTS.node, placed=_INPUTS.placed)
    node_local = False
    weight = SPREAD_WEIGHT

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if ctx.soft_spread is not None else ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        soft = ctx.soft_spread
        if soft is None:
            return None
        return spread.soft_scores(ctx.pod, ctx.state, soft, nodes)
