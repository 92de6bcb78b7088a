"""SpreadByLabels: the policy's spreadBy. Pods sharing a value of a listed label (one tenant)
are spread across nodes: fewer such pods on a node is better, weighted per label key against the
load score. It ranks only the nodes left after the hot pass-over, so it never sends a pod to a
hot node; among cool nodes, load and spreading trade off by their weights.

Pods count on every namespace (a tenant's pods often span several) unless terminating. It
depends on other pods, so it signs UNSIGNABLE for a pod carrying one of the label keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import CycleContext
from ..plugin import UNSIGNABLE, Inputs, ScorePlugin, Signature
from ..scoring import reverse_normalize
from ..types import NodeInfo


def _keys(ctx: CycleContext) -> list[tuple[str, str, float]]:
    """(label key, the pod's value, weight) for each spreadBy key the pod carries."""
    policy = ctx.policy_if_any
    if policy is None:
        return []
    labels = ctx.pod.labels
    return [
        (s.label_key, labels[s.label_key], s.weight)
        for s in policy.spec.spread_by
        if s.label_key in labels
    ]


class SpreadByLabels(ScorePlugin):
    name = "SpreadByLabels"
    inputs = Inputs(pod=("labels",), placed=("labels", "deleting"))
    node_local = False
    weight = 0  # per policy: the sum of the applicable spreadBy weights (weight_for)

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if _keys(ctx) else ()

    def weight_for(self, ctx: CycleContext) -> float:
        return sum(weight for _, _, weight in _keys(ctx))

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        keys = _keys(ctx)
        if not keys:
            return None
        total = sum(weight for _, _, weight in keys)
        raw = []
        for node in nodes:
            value = 0.0
            for other in ctx.state.pods_on(node.name):
                if other.deleting:
                    continue
                labels = other.labels
                value += sum(w for key, v, w in keys if labels.get(key) == v)
            raw.append(value / total)
        return reverse_normalize(raw)
