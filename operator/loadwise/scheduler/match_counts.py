"""MatchCounts: how many placed pods each selector in use matches, per node and per topology
domain, kept as pods come and go, so topology spread and inter-pod affinity read counts instead
of scanning every pod (or every node with a matching pod).

A matcher (a spread constraint's namespace and selector, or a set of affinity terms) is tracked
from the first cycle that asks for it: counted once over every pod, then updated on each pod
accounted or removed. The least recently asked are dropped past `limit`, since a pod's own
labels (matchLabelKeys) can make selectors that no later pod shares. Counts are sparse (absent:
none). Per node, they include pods on nodes that no longer exist; per domain (a topology key's
value, over the existing nodes in a scope: with some keys, matching a pod's node affinity,
tolerated by its tolerations) they do not, so they are dropped whenever a node comes, goes or
changes labels or taints.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from ..framework.podaffinity import AffinityTerm
from ..framework.spread import NodeScope
from ..framework.types import NodeInfo, PodInfo
from ..framework.view import PodMatcher

NamespaceLabels = Mapping[str, Mapping[str, str]]
DomainKey = tuple[str, NodeScope]  # (topology key, the nodes whose pods count)
MAX_DOMAIN_KEYS = 16  # per matcher


@dataclass(slots=True)
class _Tracked:
    per_node: dict[str, int]
    per_domain: dict[DomainKey, Counter[str]] = field(default_factory=dict)

    def update(self, node: NodeInfo | None, name: str, delta: int) -> None:
        left = self.per_node.get(name, 0) + delta
        if left > 0:
            self.per_node[name] = left
        else:
            self.per_node.pop(name, None)
        if node is None:
            return
        labels = node.labels
        for (key, scope), counts in self.per_domain.items():
            if scope.includes(node):
                value = labels.get(key, "")
                counts[value] += delta
                if counts[value] <= 0:
                    del counts[value]


class MatchCounts:
    def __init__(self, limit: int = 128) -> None:
        self.limit = limit
        self._tracked: OrderedDict[PodMatcher, _Tracked] = OrderedDict()

    def _get(
        self, matcher: PodMatcher, pods: Iterable[PodInfo], namespaces: NamespaceLabels
    ) -> _Tracked:
        tracked = self._tracked.get(matcher)
        if tracked is not None:
            self._tracked.move_to_end(matcher)
            return tracked
        counts: dict[str, int] = {}
        for pod in pods:
            if matcher.matches(pod, namespaces):
                counts[pod.node_name] = counts.get(pod.node_name, 0) + 1
        tracked = self._tracked[matcher] = _Tracked(counts)
        if len(self._tracked) > self.limit:
            self._tracked.popitem(last=False)
        return tracked

    def per_node(
        self, matcher: PodMatcher, pods: Iterable[PodInfo], namespaces: NamespaceLabels
    ) -> Mapping[str, int]:
        """Matching pods per node name; `pods` (every placed pod) is read only the first time."""
        return self._get(matcher, pods, namespaces).per_node

    def per_domain(
        self,
        matcher: PodMatcher,
        key: str,
        scope: NodeScope,
        pods: Iterable[PodInfo],
        namespaces: NamespaceLabels,
        nodes: Mapping[str, NodeInfo],
    ) -> Mapping[str, int]:
        """Matching pods per value of `key` ("" on nodes without it), over the existing nodes
        in `scope`."""
        tracked = self._get(matcher, pods, namespaces)
        counts = tracked.per_domain.get((key, scope))
        if counts is None:
            counts = Counter()
            for name, matches in tracked.per_node.items():
                node = nodes.get(name)
                if node is not None and scope.includes(node):
                    counts[node.labels.get(key, "")] += matches
            if len(tracked.per_domain) >= MAX_DOMAIN_KEYS:
                tracked.per_domain.clear()
            tracked.per_domain[(key, scope)] = counts
        return counts

    def added(self, pod: PodInfo, namespaces: NamespaceLabels, node: NodeInfo | None) -> None:
        for matcher, tracked in self._tracked.items():
            if matcher.matches(pod, namespaces):
                tracked.update(node, pod.node_name, 1)

    def removed(self, pod: PodInfo, namespaces: NamespaceLabels, node: NodeInfo | None) -> None:
        for matcher, tracked in self._tracked.items():
            if matcher.matches(pod, namespaces):
                tracked.update(node, pod.node_name, -1)

    def nodes_changed(self) -> None:
        """A node came, went or changed labels or taints: counts per domain are recounted when
        asked."""
        for tracked in self._tracked.values():
            tracked.per_domain.clear()

    def namespaces_changed(self) -> None:
        """Namespace labels changed: matchers with namespace selectors may match differently."""
        for matcher in [m for m in self._tracked if m.reads_namespace_labels]:
            del self._tracked[matcher]


class PlacedTerms:
    """Placed pods' terms of one kind (`terms_of`: required anti-affinity; or the weighted terms
    that score): for each distinct (term, weight), how many placed pods carry it per node and
    per value of its topology key, so a cycle matches the incoming pod once per term rather
    than once per placed pod, and reads counts per domain."""

    def __init__(self, terms_of: Callable[[PodInfo], Iterable[tuple[AffinityTerm, int]]]) -> None:
        self._terms_of = terms_of
        self._terms: dict[tuple[AffinityTerm, int], _Tracked] = {}

    def added(self, pod: PodInfo, node: NodeInfo | None) -> None:
        for term in self._terms_of(pod):
            tracked = self._terms.get(term)
            if tracked is None:
                tracked = self._terms[term] = _Tracked({})
            tracked.update(node, pod.node_name, 1)

    def removed(self, pod: PodInfo, node: NodeInfo | None) -> None:
        for term in self._terms_of(pod):
            tracked = self._terms.get(term)
            if tracked is not None:
                tracked.update(node, pod.node_name, -1)
                if not tracked.per_node:
                    del self._terms[term]

    def per_domain(
        self, nodes: Mapping[str, NodeInfo]
    ) -> Iterator[tuple[AffinityTerm, int, Mapping[str, int]]]:
        """Each term and weight with its placed pods per value of its topology key (existing
        nodes that have the key)."""
        for (term, weight), tracked in self._terms.items():
            key = term.topology_key
            scope = NodeScope(frozenset({key}))
            counts = tracked.per_domain.get((key, scope))
            if counts is None:
                counts = tracked.per_domain[(key, scope)] = Counter()
                for name, carrying in tracked.per_node.items():
                    node = nodes.get(name)
                    if node is not None and key in node.labels:
                        counts[node.labels[key]] += carrying
            yield term, weight, counts

    def nodes_changed(self) -> None:
        for tracked in self._terms.values():
            tracked.per_domain.clear()
