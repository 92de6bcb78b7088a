"""PodTopologySpread: DoNotSchedule constraints filter, ScheduleAnyway constraints score.

Counting follows kube-scheduler: a node counts only if it has every constraint's topology key
and passes the constraint's node inclusion policies (nodeAffinityPolicy Honor by default,
nodeTaintsPolicy Ignore by default); pods count when in the incoming pod's namespace, not
terminating, and matching the selector (plus matchLabelKeys). skew = count in the node's domain +
(1 if the pod matches its own selector) - global minimum, where the minimum is 0 while there are
fewer domains than minDomains.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .selectors import Requirement, Selector, parse_label_selector, selects
from .taints import first_untolerated

if TYPE_CHECKING:
    from .types import NodeInfo, PodInfo
    from .view import ClusterView

ERR_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
ERR_MISSING_LABEL = ERR_CONSTRAINTS + " (missing required label)"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool  # DoNotSchedule
    selector: Selector | None
    min_domains: int
    honor_node_affinity: bool
    honor_taints: bool


def parse_constraints(
    spec: Mapping[str, Any], labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    out = []
    for raw in spec.get("topologySpreadConstraints") or ():
        selector = parse_label_selector(raw.get("labelSelector"))
        keys = tuple(k for k in raw.get("matchLabelKeys") or () if k in labels)
        if selector is not None and keys:
            selector = selector.with_requirements(
                tuple(Requirement(k, "In", (labels[k],)) for k in keys)
            )
        out.append(
            SpreadConstraint(
                max_skew=int(raw.get("maxSkew") or 1),
                topology_key=str(raw.get("topologyKey") or ""),
                hard=raw.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule",
                selector=selector,
                min_domains=int(raw.get("minDomains") or 1),
                honor_node_affinity=raw.get("nodeAffinityPolicy", "Honor") == "Honor",
                honor_taints=raw.get("nodeTaintsPolicy", "Ignore") == "Honor",
            )
        )
    return tuple(out)


@dataclass(slots=True)
class SpreadCounts:
    constraints: tuple[SpreadConstraint, ...]
    per_pair: Counter[tuple[str, str]]  # includes eligible domains with 0 matches
    domains: Counter[str]  # topology key -> number of eligible domains
    minimum: dict[str, int]  # topology key -> min matches over eligible domains


def _included(c: SpreadConstraint, pod: PodInfo, node: NodeInfo) -> bool:
    if c.honor_node_affinity and not pod.node_affinity.matches(node.name, node.labels):
        return False
    return not (c.honor_taints and first_untolerated(node.taints, pod.tolerations) is not None)


def count(
    pod: PodInfo, state: ClusterView, constraints: Sequence[SpreadConstraint]
) -> SpreadCounts:
    keys = {c.topology_key for c in constraints}
    per_pair: Counter[tuple[str, str]] = Counter()
    for node in state.nodes.values():
        if not keys.issubset(node.labels):
            continue
        pods_here = None
        for c in constraints:
            if not _included(c, pod, node):
                continue
            pair = (c.topology_key, node.labels[c.topology_key])
            if pods_here is None:
                pods_here = list(state.pods_on(node.name))
            per_pair[pair] += sum(
                1
                for other in pods_here
                if other.namespace == pod.namespace
                and not other.deleting
                and selects(c.selector, other.labels)
            )
    domains: Counter[str] = Counter(key for key, _ in per_pair)
    minimum: dict[str, int] = {}
    for (key, _), matches in per_pair.items():
        minimum[key] = min(matches, minimum.get(key, matches))
    return SpreadCounts(tuple(constraints), per_pair, domains, minimum)


def filter_node(pod: PodInfo, node: NodeInfo, counts: SpreadCounts) -> str | None:
    for c in counts.constraints:
        value = node.labels.get(c.topology_key)
        if value is None:
            return ERR_MISSING_LABEL
        minimum = counts.minimum.get(c.topology_key)
        if minimum is None:
            continue  # no eligible domain at all: nothing to be skewed against
        if counts.domains[c.topology_key] < c.min_domains:
            minimum = 0
        self_match = 1 if selects(c.selector, pod.labels) else 0
        skew = counts.per_pair.get((c.topology_key, value), 0) + self_match - minimum
        if skew > c.max_skew:
            return ERR_CONSTRAINTS
    return None


def soft_score(node: NodeInfo, counts: SpreadCounts) -> float:
    """ScheduleAnyway: fewer matching pods in the node's domains is better (an approximation of
    kube-scheduler's weighting; lower is better, the caller normalises)."""
    total = 0.0
    for c in counts.constraints:
        value = node.labels.get(c.topology_key)
        if value is not None:
            total += counts.per_pair.get((c.topology_key, value), 0) + c.max_skew - 1
    return total
