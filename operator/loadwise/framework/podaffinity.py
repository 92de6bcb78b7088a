"""InterPodAffinity: required pod affinity and anti-affinity, and existing pods' anti-affinity
against the incoming pod, counted per topology pair exactly as kube-scheduler's PreFilter does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .selectors import Selector, parse_label_selector, selects
from .spread import NodeScope

if TYPE_CHECKING:
    from .types import NodeInfo, PodInfo
    from .view import ClusterView

TopologyPair = tuple[str, str]

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


def required_terms(spec: Mapping[str, Any], kind: str, namespace: str) -> tuple[AffinityTerm, ...]:
    """kind: podAffinity or podAntiAffinity."""
    section = (spec.get("affinity") or {}).get(kind) or {}
    return parse_terms(section.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace)


def _pair(node: NodeInfo | None, key: str) -> TopologyPair | None:
    if node is None or key not in node.labels:
        return None
    return (key, node.labels[key])


@dataclass(slots=True)
class AffinityCounts:
    affinity: Counter[TopologyPair]
    anti_affinity: Counter[TopologyPair]
    existing_anti: Counter[TopologyPair]


def prefilter(pod: PodInfo, state: ClusterView) -> AffinityCounts:
    ns_labels = state.namespaces
    affinity: Counter[TopologyPair] = Counter()
    anti: Counter[TopologyPair] = Counter()
    existing: Counter[TopologyPair] = Counter()
    # Existing pods' required anti-affinity terms that the incoming pod matches.
    for uid in state.anti_affinity_pods:
        other = state.pods.get(uid)
        if other is None:
            continue
        node = state.nodes.get(other.node_name)
        for term in other.anti_affinity_terms:
            if term.matches(pod.namespace, pod.labels, ns_labels):
                pair = _pair(node, term.topology_key)
                if pair is not None:
                    existing[pair] += 1
    if pod.affinity_terms:  # pods matching all terms count in each term's topology
        match = TermsMatch(pod.affinity_terms)
        for term in pod.affinity_terms:
            key = term.topology_key
            scope = NodeScope(frozenset({key}))
            for value, matches in state.matching_domains(match, key, scope).items():
                affinity[(key, value)] += matches
    for term in pod.anti_affinity_terms:
        key = term.topology_key
        match, scope = TermsMatch((term,)), NodeScope(frozenset({key}))
        for value, matches in state.matching_domains(match, key, scope).items():
            anti[(key, value)] += matches
    return AffinityCounts(affinity, anti, existing)


def filter_node(
    pod: PodInfo, node: NodeInfo, counts: AffinityCounts, ns_labels: Mapping[str, Mapping[str, str]]
) -> str | None:
    if counts.existing_anti and any(
        counts.existing_anti.get(pair, 0) > 0 for pair in node.labels.items()
    ):
        return ERR_EXISTING_ANTI
    if pod.affinity_terms:
        pods_exist = True
        for term in pod.affinity_terms:
            pair = _pair(node, term.topology_key)
            if pair is None:
                return ERR_AFFINITY  # every topology label must exist on the node
            if counts.affinity.get(pair, 0) <= 0:
                pods_exist = False
        # The first pod of a group with affinity to itself may go anywhere with the topologies.
        if not pods_exist and not (
            not counts.affinity
            and all(t.matches(pod.namespace, pod.labels, ns_labels) for t in pod.affinity_terms)
        ):
            return ERR_AFFINITY
    if counts.anti_affinity:
        for term in pod.anti_affinity_terms:
            pair = _pair(node, term.topology_key)
            if pair is not None and counts.anti_affinity.get(pair, 0) > 0:
                return ERR_ANTI
    return None
