"""InterPodAffinity: required pod affinity and anti-affinity by topology key (namespaces,
namespaceSelector), and placed pods' anti-affinity against the incoming pod; preferred pod
affinity and anti-affinity (both ways) as a preference, scored as kube-scheduler scores it."""

from __future__ import annotations

from collections.abc import Sequence

from .. import podaffinity
from ..context import CycleContext
from ..plugin import (
    AFFINITY_BY_DOMAIN,
    HOSTNAME_APART,
    UNSIGNABLE,
    FilterPlugin,
    Inputs,
    ScorePlugin,
    Signature,
)
from ..scoring import INTER_POD_AFFINITY_WEIGHT, MAX_SCORE
from ..types import NodeInfo, PodInfo


def required_affinity(ctx: CycleContext) -> podaffinity.AffinityCounts | None:
    """Required (anti-)affinity counts (PreFilter); None when neither the pod nor any placed
    pod has such terms."""
    return ctx.prefiltered(_required_affinity)


def _required_affinity(ctx: CycleContext) -> podaffinity.AffinityCounts | None:
    pod = ctx.pod
    if not (pod.affinity_terms or pod.anti_affinity_terms or ctx.state.anti_affinity_pods):
        return None
    return podaffinity.prefilter(pod, ctx.state)


def affinity_preference(ctx: CycleContext) -> podaffinity.TopologyScores | None:
    """Preferred inter-pod affinity's scores per topology value; None when no term applies."""
    return ctx.prefiltered(_affinity_preference)


def _affinity_preference(ctx: CycleContext) -> podaffinity.TopologyScores | None:
    pod = ctx.pod
    if not (
        pod.preferred_affinity_terms
        or pod.preferred_anti_affinity_terms
        or ctx.state.weighted_affinity_pods
    ):
        return None
    return podaffinity.preference_scores(pod, ctx.state)


class InterPodAffinity(FilterPlugin):
    name = "InterPodAffinity"
    fast_path = HOSTNAME_APART  # when every term that applies is by hostname (index.py)
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
            counts = required_affinity(ctx)
            if counts is not None and counts.existing_anti:
                return UNSIGNABLE
        return ()

    def waits_for_pods(self, pod: PodInfo) -> bool:
        return bool(pod.affinity_terms)

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        counts = required_affinity(ctx)
        if counts is None:
            return None
        reason = podaffinity.filter_node(ctx.pod, node, counts, ctx.state.namespaces)
        return [reason] if reason else None

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        return reasons == [podaffinity.ERR_AFFINITY]  # removing pods never adds a match


class PodAffinityPreference(ScorePlugin):
    """kube-scheduler's InterPodAffinity Score and NormalizeScore: per topology value, the
    weights of the pod's preferred terms times the placed pods they match there, minus those of
    its preferred anti-affinity terms, plus placed pods' required affinity (weight 1) and
    preferred (anti-)affinity terms that match the pod; scaled to 0..100 between the lowest and
    highest node (truncated, as kube-scheduler does)."""

    fast_path = AFFINITY_BY_DOMAIN  # by keys other than hostname (by_domain.py)

    name = "InterPodAffinityScore"
    inputs = Inputs(
        pod=("preferred_affinity_terms", "preferred_anti_affinity_terms", "labels", "namespace"),
        node=("labels",),
        placed=(
            "labels",
            "namespace",
            "affinity_terms",
            "preferred_affinity_terms",
            "preferred_anti_affinity_terms",
        ),
        namespaces=True,
    )
    node_local = False
    weight = INTER_POD_AFFINITY_WEIGHT

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if affinity_preference(ctx) is not None else ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        scores = affinity_preference(ctx)
        if scores is None:
            return None
        raw = [podaffinity.preference_score(scores, node) for node in nodes]
        low, high = min(raw, default=0), max(raw, default=0)
        return [preference_share(r, low, high) for r in raw]


def preference_share(raw: int, low: int, high: int) -> float:
    """NormalizeScore: 0..100 between the lowest and highest node, truncated."""
    return float(int(MAX_SCORE * (raw - low) / (high - low))) if high > low else 0.0
