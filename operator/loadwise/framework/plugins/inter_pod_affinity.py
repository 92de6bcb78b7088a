"""InterPodAffinity: required pod affinity and anti-affinity by topology key (namespaces,
namespaceSelector), and placed pods' anti-affinity against the incoming pod."""

from __future__ import annotations

from .. import podaffinity
from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ..types import NodeInfo, PodInfo


class InterPodAffinity(FilterPlugin):
    name = "InterPodAffinity"
    inputs = Inputs(
        pod=("affinity_terms", "anti_affinity_terms", "labels", "namespace"),
        node=("labels",),
        placed=("labels", "namespace", "anti_affinity_terms"),
        namespaces=True,
    )
    node_local = False
    helped_by_placement = True

    def sign(self, ctx: CycleContext) -> Signature:
        pod = ctx.pod
        if pod.affinity_terms or pod.anti_affinity_terms:
            return UNSIGNABLE
        if ctx.state.anti_affinity_pods:  # a placed pod's anti-affinity may be aimed at it
            counts = ctx.affinity
            if counts is not None and counts.existing_anti:
                return UNSIGNABLE
        return ()

    def waits_for_pods(self, pod: PodInfo) -> bool:
        return bool(pod.affinity_terms)

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        counts = ctx.affinity
        if counts is None:
            return None
        reason = podaffinity.filter_node(ctx.pod, node, counts, ctx.state.namespaces)
        return [reason] if reason else None
