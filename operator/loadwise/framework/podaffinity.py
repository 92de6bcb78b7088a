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


def required_terms(spec: Mapping[str, Any], kind: str, namespace: str) -> tuple[AffinityTerm, ...]:
    """kind: podAffinity or podAntiAffinity."""
    section = (spec.get("affinity") or {}).get(kind) or {}
    return parse_terms(section.get("requiredDuringSchedulingIgnoredDuringExecution"), namespace)


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
