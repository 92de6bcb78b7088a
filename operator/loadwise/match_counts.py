"""MatchCounts: how many placed pods each selector in use matches, per node, kept as pods come
and go, so topology spread and inter-pod affinity read counts instead of scanning every pod.

A matcher (a spread constraint's namespace and selector, or a set of affinity terms) is tracked
from the first cycle that asks for it: counted once over every pod, then updated on each pod
accounted or removed. The least recently asked are dropped past `limit`, since a pod's own
labels (matchLabelKeys) can make selectors that no later pod shares. Counts are per node, sparse
(nodes with none are absent) and include pods on nodes that no longer exist: readers skip those,
as they skip nodes missing a topology key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from .framework.types import PodInfo
from .framework.view import PodMatcher

NamespaceLabels = Mapping[str, Mapping[str, str]]


class MatchCounts:
    def __init__(self, limit: int = 128) -> None:
        self.limit = limit
        self._tracked: OrderedDict[PodMatcher, dict[str, int]] = OrderedDict()

    def per_node(
        self, matcher: PodMatcher, pods: Iterable[PodInfo], namespaces: NamespaceLabels
    ) -> Mapping[str, int]:
        """Matching pods per node name; `pods` (every placed pod) is read only the first time."""
        counts = self._tracked.get(matcher)
        if counts is not None:
            self._tracked.move_to_end(matcher)
            return counts
        counts = {}
        for pod in pods:
            if matcher.matches(pod, namespaces):
                counts[pod.node_name] = counts.get(pod.node_name, 0) + 1
        self._tracked[matcher] = counts
        if len(self._tracked) > self.limit:
            self._tracked.popitem(last=False)
        return counts

    def added(self, pod: PodInfo, namespaces: NamespaceLabels) -> None:
        node = pod.node_name
        for matcher, counts in self._tracked.items():
            if matcher.matches(pod, namespaces):
                counts[node] = counts.get(node, 0) + 1

    def removed(self, pod: PodInfo, namespaces: NamespaceLabels) -> None:
        node = pod.node_name
        for matcher, counts in self._tracked.items():
            if matcher.matches(pod, namespaces):
                left = counts.get(node, 0) - 1
                if left > 0:
                    counts[node] = left
                else:
                    counts.pop(node, None)

    def namespaces_changed(self) -> None:
        """Namespace labels changed: matchers with namespace selectors may match differently."""
        for matcher in [m for m in self._tracked if m.reads_namespace_labels]:
            del self._tracked[matcher]
