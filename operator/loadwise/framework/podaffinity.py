"""InterPodAffinity: required pod affinity and anti-affinity, and existing pods' anti-affinity
against the incoming pod, counted per topology pair exactly as kube-scheduler's PreFilter does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .selectors import Selector, parse_label_selector, selects
from .spread import NodeScope

if TYPE_CHECKING:
    from .types import NodeInfo, PodInfo
    from .view import ClusterView

ERR_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI = "node(s) didn't match pod anti-affinity rules"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    selector: Selector | None
    namespaces: frozenset[str]
    namespace_selector: Selector | None
    topology_key: str

    def matches(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, Mapping[str, str]]
    ) -> bool:
        in_scope = namespace in self.namespaces or selects(
            self.namespace_selector, ns_labels.get(namespace, {})
        )
        return in_scope and selects(self.selector, labels)


def parse_terms(
    raw: Iterable[Mapping[str, Any]] | None, own_namespace: str
) -> tuple[AffinityTerm, ...]:
    terms = []
    for term in raw or ():
        namespaces = frozenset(term.get("namespaces") or ())
        ns_selector = parse_label_selector(term.get("namespaceSelector"))
        if not namespaces and ns_selector is None:
            namespaces = frozenset({own_namespace})
        terms.append(
            AffinityTerm(
                parse_label_selector(term.get("labelSelector")),
                namespaces,
                ns_selector,
                str(term.get("topologyKey") or ""),
            )
        )
    return tuple(terms)


@dataclass(frozen=True, slots=True)
class TermsMatch:
    """The placed pods that every one of `terms` matches; the cluster state counts them per
    node."""

    terms: tuple[AffinityTerm, ...]

    @property
    def reads_namespace_labels(self) -> bool:
        return any(t.namespace_selector is not None for t in self.terms)

    def matches(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
        return all(t.matches(pod.namespace, pod.labels, namespaces) for t in self.terms)


@dataclass(frozen=True, slots=True)
class CarriesTerm:
    """The placed pods that carry `term` among their required anti-affinity terms: counted per
    node, they tell which nodes a placed pod's anti-affinity by hostname refuses."""

    term: AffinityTerm

    @property
    def reads_namespace_labels(self) -> bool:
        return False

    def matches(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
        return self.term in pod.anti_affinity_terms


def required_terms(spec: Mapping[str, Any], kind: str, namespace: str) -> tuple[AffinityTerm, ...]:
    """kind: podAffinity or podAntiAffinity."""
    section = (spec.get("affinity") or {}).get(kind) or {}
    return parse_terms(section.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace)


def preferred_terms(
    spec: Mapping[str, Any], kind: str, namespace: str
) -> tuple[tuple[int, AffinityTerm], ...]:
    """kind: podAffinity or podAntiAffinity; (weight, term) pairs."""
    section = (spec.get("affinity") or {}).get(kind) or {}
    weighted = section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(
        (int(w.get("weight") or 0), parse_terms([w.get("podAffinityTerm") or {}], namespace)[0])
        for w in weighted
    )


# kube-scheduler's hardPodAffinityWeight: a placed pod's required affinity term that the
# incoming pod matches draws it like a preferred term of this weight.
HARD_POD_AFFINITY_WEIGHT = 1


def weighted_terms(pod: PodInfo) -> Iterable[tuple[AffinityTerm, int]]:
    """A placed pod's terms that draw (positive) or push away (negative) a pod they match."""
    for term in pod.affinity_terms:
        yield term, HARD_POD_AFFINITY_WEIGHT
    for weight, term in pod.preferred_affinity_terms:
        yield term, weight
    for weight, term in pod.preferred_anti_affinity_terms:
        yield term, -weight


TopologyScores = dict[str, dict[str, int]]  # topology key -> value -> summed weights


def preference_scores(pod: PodInfo, state: ClusterView) -> TopologyScores | None:
    """kube-scheduler's InterPodAffinity PreScore: per topology value, the weights of the pod's
    preferred (anti-)affinity terms times the placed pods they match there, plus the placed
    pods' required affinity (hardPodAffinityWeight) and preferred (anti-)affinity terms that
    match the pod. None when nothing applies (the plugin is skipped). Counts come from the
    cluster state per domain, so this is O(terms x domains), not O(pods)."""
    scores: TopologyScores = {}

    def add(key: str, per_value: Mapping[str, int], weight: int) -> None:
        into = scores.setdefault(key, {})
        for value, n in per_value.items():
            if n:  # only nodes with the key count (the scope), so "" is a real value
                into[value] = into.get(value, 0) + weight * n

    for sign, terms in ((1, pod.preferred_affinity_terms), (-1, pod.preferred_anti_affinity_terms)):
        for weight, term in terms:
            key = term.topology_key
            scope = NodeScope(frozenset({key}))
            add(key, state.matching_domains(TermsMatch((term,)), key, scope), sign * weight)
    ns_labels = state.namespaces
    for term, weight, per_value in state.weighted_affinity_domains():
        if per_value and term.matches(pod.namespace, pod.labels, ns_labels):
            add(term.topology_key, per_value, weight)
    return scores or None


def preference_score(scores: TopologyScores, node: NodeInfo) -> int:
    labels = node.labels
    return sum(per_value.get(labels[key], 0) for key, per_value in scores.items() if key in labels)


PerValue = tuple[str, Mapping[str, int]]  # a topology key, matching pods per value of it


@dataclass(slots=True)
class AffinityCounts:
    """PreFilter's counts, read from the cluster state's counts per domain (not copied): for
    each of the pod's affinity terms, the pods matching all of them; for each anti-affinity
    term, the pods it matches; placed pods' anti-affinity terms that match the pod (only
    those with pods on nodes that have the key)."""

    affinity: list[PerValue]
    anti_affinity: list[PerValue]
    existing_anti: list[PerValue]


def prefilter(pod: PodInfo, state: ClusterView) -> AffinityCounts:
    ns_labels = state.namespaces
    existing = [
        (term.topology_key, per_value)
        for term, per_value in state.anti_affinity_domains()
        if per_value and term.matches(pod.namespace, pod.labels, ns_labels)
    ]
    affinity: list[PerValue] = []
    if pod.affinity_terms:  # pods matching all terms count in each term's topology
        match = TermsMatch(pod.affinity_terms)
        for term in pod.affinity_terms:
            key = term.topology_key
            scope = NodeScope(frozenset({key}))
            affinity.append((key, state.matching_domains(match, key, scope)))
    anti: list[PerValue] = []
    for term in pod.anti_affinity_terms:
        key = term.topology_key
        match, scope = TermsMatch((term,)), NodeScope(frozenset({key}))
        anti.append((key, state.matching_domains(match, key, scope)))
    return AffinityCounts(affinity, anti, existing)


def filter_node(
    pod: PodInfo, node: NodeInfo, counts: AffinityCounts, ns_labels: Mapping[str, Mapping[str, str]]
) -> str | None:
    labels = node.labels
    for key, per_value in counts.existing_anti:
        value = labels.get(key)
        if value is not None and per_value.get(value, 0) > 0:
            return ERR_EXISTING_ANTI
    if pod.affinity_terms:
        pods_exist = True
        for key, per_value in counts.affinity:
            value = labels.get(key)
            if value is None:
                return ERR_AFFINITY  # every topology label must exist on the node
            if per_value.get(value, 0) <= 0:
                pods_exist = False
        # The first pod of a group with affinity to itself may go anywhere with the topologies.
        if not pods_exist and not (
            not any(per_value for _, per_value in counts.affinity)
            and all(t.matches(pod.namespace, pod.labels, ns_labels) for t in pod.affinity_terms)
        ):
            return ERR_AFFINITY
    for key, per_value in counts.anti_affinity:
        value = labels.get(key)
        if value is not None and per_value.get(value, 0) > 0:
            return ERR_ANTI
    return None
