"""One scheduling cycle: Filter -> Score -> NormalizeScore -> pick. Pure: no I/O, no awaits."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..metrics.cache import NodeSample
from ..policy import Policy
from ..state import ClusterState, PodInfo
from .filters import DEFAULT_FILTERS, Filter
from .scoring import NodeScore, normalize, score_node


@dataclass(frozen=True, slots=True)
class Decision:
    node: str
    score: float  # normalised 0..100
    ranked: Sequence[tuple[float, NodeScore]]  # (normalised, raw details), best first
    policy: str

    @property
    def chosen(self) -> NodeScore:
        return self.ranked[0][1]

    @property
    def runner_up(self) -> tuple[float, NodeScore] | None:
        return self.ranked[1] if len(self.ranked) > 1 else None


@dataclass(frozen=True, slots=True)
class Unschedulable:
    message: str
    reasons: Mapping[str, int]


def failure_message(total_nodes: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's summary: "0/12 nodes are available: 5 Insufficient cpu, 7 ..."."""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."


def schedule_one(
    pod: PodInfo,
    state: ClusterState,
    policy: Policy,
    samples: Mapping[str, NodeSample],
    now: float,
    rng: random.Random,
    filters: Sequence[Filter] = DEFAULT_FILTERS,
) -> Decision | Unschedulable:
    if pod.invalid_reason:
        return Unschedulable(f"pod cannot be scheduled: {pod.invalid_reason}", {})
    reasons: Counter[str] = Counter()
    feasible = []
    for node in state.nodes.values():
        requested = state.requested(node.name)
        for check in filters:
            failed = check(pod, node, requested)
            if failed:
                reasons.update(failed)
                break
        else:
            feasible.append(node)
    if not feasible:
        return Unschedulable(failure_message(len(state.nodes), reasons), reasons)
    raw = [score_node(pod, node, state, policy, samples, now) for node in feasible]
    normalised = normalize([s.score for s in raw])
    # Random tie-break among equal best scores, as kube-scheduler does: equal nodes share a burst.
    keyed = [(n, rng.random(), s) for n, s in zip(normalised, raw, strict=True)]
    keyed.sort(key=lambda item: (-item[0], item[1]))
    ranked = [(n, s) for n, _, s in keyed]
    best_score, best = ranked[0]
    return Decision(best.node, best_score, ranked, policy.name)
