"""PodTopologySpread: DoNotSchedule constraints filter, ScheduleAnyway constraints score.

Counting follows kube-scheduler: a node counts only if it has every constraint's topology key
and passes the constraint's node inclusion policies (nodeAffinityPolicy Honor by default,
nodeTaintsPolicy Ignore by default); pods count when in the incoming pod's namespace, not
terminating, and matching the selector (plus matchLabelKeys; an empty selector counts none,
though the incoming pod matches it). skew = count in the node's domain + (1 if the pod matches
its own selector) - global minimum, where the minimum is 0 while there are fewer domains than
minDomains.

ScheduleAnyway constraints are scored with kube-scheduler's formulas (scoring.go): a pod with no
constraints of its own gets the system defaults (hostname maxSkew 3, zone maxSkew 5) over the
pods that its Services and controller select (helper.DefaultSelector), and nodes missing a
topology label are then scored rather than ignored.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from .selectors import RequiredNodeAffinity, Requirement, Selector, parse_label_selector, selects
from .taints import Toleration, first_untolerated

if TYPE_CHECKING:
    from .types import NodeInfo, PodInfo
    from .view import ClusterView

ERR_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
ERR_MISSING_LABEL = ERR_CONSTRAINTS + " (missing required label)"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
MAX_NODE_SCORE = 100


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


@dataclass(frozen=True, slots=True)
class SpreadMatch:
    """The pods a constraint counts: in `namespace`, not terminating, matching `selector`
    (never an empty one: it counts nothing). The cluster state counts them per node."""

    namespace: str
    selector: Selector

    @property
    def reads_namespace_labels(self) -> bool:
        return False

    def matches(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
        return (
            pod.namespace == self.namespace
            and not pod.deleting
            and self.selector.matches(pod.labels)
        )


_NONE: Mapping[str, int] = {}


def matches_anything(selector: Selector | None) -> TypeGuard[Selector]:
    """countPodsMatchSelector: an empty (or nil) selector counts nothing."""
    return selector is not None and bool(selector.match_labels or selector.expressions)


def matching_per_node(
    state: ClusterView, selector: Selector | None, namespace: str
) -> Mapping[str, int]:
    """countPodsMatchSelector per node."""
    if not matches_anything(selector):
        return _NONE
    return state.matching(SpreadMatch(namespace, selector))


@dataclass(frozen=True, slots=True)
class NodeScope:
    """The nodes whose pods count: those with every key in `keys`, matching `affinity` (the
    incoming pod's, under nodeAffinityPolicy Honor) and with taints that `tolerations` (the
    incoming pod's, under nodeTaintsPolicy Honor) tolerate. The cluster state keeps counts per
    domain for each scope in use."""

    keys: frozenset[str]
    affinity: RequiredNodeAffinity | None = None
    tolerations: tuple[Toleration, ...] | None = None

    def includes(self, node: NodeInfo) -> bool:
        labels = node.labels
        if not self.keys.issubset(labels):
            return False
        if self.affinity is not None and not self.affinity.matches(node.name, labels):
            return False
        return self.tolerations is None or first_untolerated(node.taints, self.tolerations) is None


def node_scope(c: SpreadConstraint, pod: PodInfo, keys: frozenset[str]) -> NodeScope:
    """The nodes with `keys` that the constraint's inclusion policies include for the pod."""
    honor_affinity = c.honor_node_affinity and not pod.node_affinity.empty
    return NodeScope(
        keys,
        pod.node_affinity if honor_affinity else None,
        pod.tolerations if c.honor_taints else None,
    )


@dataclass(slots=True)
class SpreadCounts:
    constraints: tuple[SpreadConstraint, ...]
    per_pair: Counter[tuple[str, str]]  # includes eligible domains with 0 matches
    domains: Counter[str]  # topology key -> number of eligible domains
    minimum: dict[str, int]  # topology key -> min matches over eligible domains


def count(
    pod: PodInfo, state: ClusterView, constraints: Sequence[SpreadConstraint]
) -> SpreadCounts:
    """PreFilter: matching pods per eligible domain (a value of the key on a node that has
    every constraint's key and passes the inclusion policies), from the state's counts."""
    keys = frozenset(c.topology_key for c in constraints)
    per_pair: Counter[tuple[str, str]] = Counter()
    for c in constraints:
        key, scope = c.topology_key, node_scope(c, pod, keys)
        for value in state.topology_values(scope)[key]:
            per_pair[(key, value)] += 0
        if matches_anything(c.selector):
            match = SpreadMatch(pod.namespace, c.selector)
            for value, matches in state.matching_domains(match, key, scope).items():
                per_pair[(key, value)] += matches
    domains: Counter[str] = Counter(key for key, _ in per_pair)
    return SpreadCounts(tuple(constraints), per_pair, domains, _minimum(per_pair))


def _minimum(per_pair: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Per topology key, the fewest matches over its eligible domains."""
    minimum: dict[str, int] = {}
    for (key, _), matches in per_pair.items():
        minimum[key] = min(matches, minimum.get(key, matches))
    return minimum


@dataclass(frozen=True, slots=True)
class NominatedHere:
    """For one check of `node`: the pods nominated to it (placed there in the state for the
    check) and the pods set aside from it (preemption's victims, for the dry run)."""

    node: NodeInfo
    added: Sequence[PodInfo]
    removed: Sequence[PodInfo] = ()


def with_nominated(counts: SpreadCounts, pod: PodInfo, here: NominatedHere) -> SpreadCounts:
    """The counts as kube-scheduler's have them in RunFilterPluginsWithNominatedPods, where
    preemption's RemovePod and the nominated pods' AddPod changed them. The state already
    has the held copies placed and the victims set aside, so selectors that select something
    count them alike; an empty selector does not: countPodsMatchSelector counts no pod for it,
    but AddPod and RemovePod test `Selector.Matches`, which for an empty selector selects
    every pod. So each added pod of the pod's namespace adds one to the node's domain of every
    hard constraint with an empty selector, and each removed one takes one away."""
    node = here.node
    keys = {c.topology_key for c in counts.constraints}
    if not keys.issubset(node.labels):  # nodeLabelsMatchSpreadConstraints
        return counts
    delta = sum(other.namespace == pod.namespace for other in here.added) - sum(
        other.namespace == pod.namespace for other in here.removed
    )
    per_pair = Counter(counts.per_pair)
    changed = False
    for c in counts.constraints:
        if c.selector is None or matches_anything(c.selector) or not delta:
            continue
        if not node_scope(c, pod, frozenset(keys)).includes(node):
            continue
        per_pair[(c.topology_key, node.labels[c.topology_key])] += delta
        changed = True
    if not changed:
        return counts
    return SpreadCounts(counts.constraints, per_pair, counts.domains, _minimum(per_pair))


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


@dataclass(frozen=True, slots=True)
class SoftSpread:
    """The ScheduleAnyway constraints a pod is scored by."""

    constraints: tuple[SpreadConstraint, ...]
    system_default: bool  # kube-scheduler's defaults: nodes missing a key are not ignored


def system_default_constraints(selector: Selector) -> tuple[SpreadConstraint, ...]:
    """kube-scheduler's default PodTopologySpread constraints (systemDefaulted), on `selector`."""
    return tuple(
        SpreadConstraint(
            max_skew=skew,
            topology_key=key,
            hard=False,
            selector=selector,
            min_domains=1,
            honor_node_affinity=True,
            honor_taints=False,
        )
        for key, skew in ((HOSTNAME, 3), (ZONE, 5))
    )


def soft_constraints(pod: PodInfo, state: ClusterView) -> SoftSpread | None:
    """The pod's own ScheduleAnyway constraints; with none of any kind, the system defaults
    over its Services' and controller's selector; None when there is nothing to spread by."""
    if pod.spread:
        soft = tuple(c for c in pod.spread if not c.hard)
        return SoftSpread(soft, system_default=False) if soft else None
    selector = state.workloads.default_selector(pod.namespace, pod.labels, pod.owner)
    if selector is None:
        return None
    return SoftSpread(system_default_constraints(selector), system_default=True)


def soft_scores(
    pod: PodInfo, state: ClusterView, soft: SoftSpread, nodes: Sequence[NodeInfo]
) -> list[float]:
    """kube-scheduler's PreScore, Score and NormalizeScore for the feasible `nodes`: per
    constraint, matching pods in the node's domain x log(domains + 2) + maxSkew - 1, rounded;
    then the fewest get 100 (max + min - score) / max. Nodes missing a topology key score 0,
    unless the constraints are the system defaults (requireAllTopologies)."""
    keys = [c.topology_key for c in soft.constraints]
    considered = [n for n in nodes if not (not soft.system_default and _missing(n, keys))]
    # Domains among the feasible nodes (a node missing the key is in the "" domain then).
    domains = [
        () if c.topology_key == HOSTNAME else {n.labels.get(c.topology_key, "") for n in considered}
        for c in soft.constraints
    ]
    scorer = SoftScorer(pod, state, soft, domains, len(considered))
    return _normalize([scorer.raw(n) for n in nodes])


def _missing(node: NodeInfo, keys: Sequence[str]) -> bool:
    labels = node.labels
    return not all(k in labels for k in keys)


class SoftScorer:
    """PreScore's state for one pod: each constraint's weight and matching pods per domain of
    the considered nodes (`domains`: their values of each non-hostname key), then raw scores
    per node. The score index builds it from domain counts, without visiting every node."""

    def __init__(
        self,
        pod: PodInfo,
        state: ClusterView,
        soft: SoftSpread,
        domains: Sequence[Iterable[str]],
        considered: int,
    ) -> None:
        constraints = self.constraints = soft.constraints
        self.require_all = require_all = not soft.system_default
        self.keys = keys = [c.topology_key for c in constraints]
        counts: list[dict[str, int]] = [dict.fromkeys(d, 0) for d in domains]
        self.counts = counts
        self.weights = [
            math.log((considered if c.topology_key == HOSTNAME else len(counts[i])) + 2)
            for i, c in enumerate(constraints)
        ]
        # Matching pods per domain, over every node (hostname domains: per node, in raw()).
        self.matching = [matching_per_node(state, c.selector, pod.namespace) for c in constraints]
        required = frozenset(keys) if require_all else frozenset()
        for i, c in enumerate(constraints):
            in_domain = counts[i]
            if not in_domain or not matches_anything(c.selector):
                continue
            key, scope = c.topology_key, node_scope(c, pod, required)
            match = SpreadMatch(pod.namespace, c.selector)
            for value, matches in state.matching_domains(match, key, scope).items():
                if value in in_domain:
                    in_domain[value] += matches

    def raw(self, node: NodeInfo) -> int | None:
        """The node's raw score; None when ignored (missing a key of the pod's own
        constraints)."""
        host = [
            per_node.get(node.name, 0)
            for per_node, c in zip(self.matching, self.constraints, strict=True)
            if c.topology_key == HOSTNAME
        ]
        return self.raw_with(node.labels, host)

    def raw_with(self, labels: Mapping[str, str], host: Sequence[int]) -> int | None:
        """The raw score of a node with these labels and `host` matching pods of its own for
        each hostname constraint, in order."""
        if self.require_all and not all(k in labels for k in self.keys):
            return None
        score, hosts = 0.0, iter(host)
        for i, c in enumerate(self.constraints):
            if c.topology_key == HOSTNAME:
                matches = next(hosts)
                if HOSTNAME not in labels:
                    continue
            elif c.topology_key not in labels:
                continue
            else:
                matches = self.counts[i][labels[c.topology_key]]
            score += matches * self.weights[i] + c.max_skew - 1
        return math.floor(score + 0.5)  # Go's math.Round, for scores >= 0


def _normalize(raw: Sequence[int | None]) -> list[float]:
    """NormalizeScore: fewer matching pods, higher score; ignored nodes (None) get 0."""
    scored = [r for r in raw if r is not None]
    low, high = min(scored, default=0), max(scored, default=0)
    return [normalized(r, low, high) for r in raw]


def normalized(raw: int | None, low: int, high: int) -> float:
    """One node's NormalizeScore, given the lowest and highest raw scores."""
    if raw is None:
        return 0.0
    if high == 0:
        return float(MAX_NODE_SCORE)
    return float(MAX_NODE_SCORE * (high + low - raw) // high)
