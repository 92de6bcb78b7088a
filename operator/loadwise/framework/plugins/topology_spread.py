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


def hard_spread(ctx: CycleContext) -> spread.SpreadCounts | None:
    """DoNotSchedule constraints' counts per domain (PreFilter), with the pods nominated to
    the node under test when the context holds them; None without such constraints."""
    return ctx.prefiltered(_hard_spread)


def _hard_spread(ctx: CycleContext) -> spread.SpreadCounts | None:
    hard = [c for c in ctx.pod.spread if c.hard]
    if not hard:
        return None
    counts = spread.count(ctx.pod, ctx.state, hard)
    if ctx.nominated is not None:
        counts = spread.with_nominated(counts, ctx.pod, ctx.nominated)
    return counts


def soft_spread(ctx: CycleContext) -> spread.SoftSpread | None:
    """ScheduleAnyway constraints: the pod's own, or kube-scheduler's system defaults (not
    under a Pack policy: spreading replicas would undo the packing, and kube-scheduler profiles
    that pack, with MostAllocated, turn the system defaults off too)."""
    return ctx.prefiltered(_soft_spread)


def _soft_spread(ctx: CycleContext) -> spread.SoftSpread | None:
    soft = spread.soft_constraints(ctx.pod, ctx.state)
    policy = ctx.policy_if_any
    packing = policy is not None and policy.spec.strategy == "Pack"
    return None if soft is not None and soft.system_default and packing else soft


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
        counts = hard_spread(ctx)
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
        return UNSIGNABLE if soft_spread(ctx) is not None else ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        soft = soft_spread(ctx)
        if soft is None:
            return None
        return spread.soft_scores(ctx.pod, ctx.state, soft, nodes)
