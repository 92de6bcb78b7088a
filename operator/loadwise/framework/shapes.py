"""The score index's state per shape: a heap of the feasible nodes in the load plugin's
order, each node's cached verdict and load score, and the cool nodes grouped by topology domain
for the fast paths by domain (by_domain.py). Superseded heap items are skipped, not removed: an
item whose node was evaluated again since (`seq`) is stale."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ..policies.policy import Policy
from ..usage.cache import NodeSample
from . import spread
from .context import CycleContext
from .scoring import NodeScore
from .types import NodeInfo
from .view import ClusterView, PodMatcher


class HeapItem(NamedTuple):
    """A feasible node in a shape's heap, in the load plugin's order (`order`)."""

    tier: int  # 0: cool, 1: hot (passed over while a cool node fits)
    rank: float  # within the tier, lower first
    tiebreak: float  # random: equal nodes share a burst
    seq: int  # the evaluation it came from: an item whose node was re-evaluated is stale
    node: str


# A node's values of some topology keys, then its own matching pods for some selectors.
Domain = tuple[str | bool | int | None, ...]
MAX_DOMAIN_KEYS = 16  # combinations of keys and selectors tracked per shape


@dataclass(slots=True)
class Entry:
    seq: int
    score: NodeScore | None  # None: infeasible
    reasons: list[str]
    item: HeapItem | None = None  # its heap item, when feasible


@dataclass(slots=True)
class ShapeHeap:
    policy: Policy
    samples: Mapping[str, NodeSample]
    epoch: int
    cursor: int
    stale_at: float  # the first time a sample used here stops being fresh
    entries: dict[str, Entry] = field(default_factory=dict)
    heap: list[HeapItem] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    feasible: int = 0
    hot: int = 0
    hot_names: set[str] = field(default_factory=set)  # feasible hot nodes
    # Cool feasible nodes per domain, for the topology keys spread pods asked about.
    domains: dict[tuple[tuple[str, ...], tuple[PodMatcher | None, ...]], Domains] = field(
        default_factory=dict
    )


@dataclass(slots=True)
class Domains:
    """The cool feasible nodes by domain: their values of `keys` (hostname: present or not)
    and how many pods each of `matchers` (hostname constraints' selectors) matches on the node
    itself. Nodes of one domain share a spread score. Kept as the shape's entries change (a pod
    placed or gone touches its node, which is re-evaluated): how many nodes per domain, and a
    heap of each domain's nodes by load score (superseded items skipped, as in the shape's)."""

    keys: tuple[str, ...]
    matchers: tuple[PodMatcher | None, ...]
    of: dict[str, Domain] = field(default_factory=dict)  # node -> its domain
    counts: Counter[Domain] = field(default_factory=Counter)
    heaps: dict[Domain, list[HeapItem]] = field(default_factory=dict)

    def add(self, node: NodeInfo, item: HeapItem, state: ClusterView) -> None:
        labels = node.labels
        domain = (
            *((key in labels) if key == spread.HOSTNAME else labels.get(key) for key in self.keys),
            *(0 if m is None else state.matching(m).get(node.name, 0) for m in self.matchers),
        )
        self.of[node.name] = domain
        self.counts[domain] += 1
        heapq.heappush(self.heaps.setdefault(domain, []), item)

    def discard(self, name: str) -> None:
        domain = self.of.pop(name, None)
        if domain is not None:
            self.counts[domain] -= 1
            if not self.counts[domain]:  # only superseded items are left in its heap
                del self.counts[domain]
                del self.heaps[domain]

    def first_passing(
        self, domain: Domain, shape: ShapeHeap, passes: Callable[[str], bool], limit: int
    ) -> list[HeapItem] | None:
        """The domain's first two nodes in load order that pass; None past `limit` nodes."""
        heap = self.heaps[domain]
        found: list[HeapItem] = []
        kept: list[HeapItem] = []
        try:
            while heap and len(found) < 2:
                if len(kept) >= limit:
                    return None
                item = heapq.heappop(heap)
                if not valid(shape, item):
                    continue
                kept.append(item)
                if passes(item.node):
                    found.append(item)
        finally:
            for item in kept:
                heapq.heappush(heap, item)
        return found

    def least_loaded(self, domain: Domain, shape: ShapeHeap) -> list[HeapItem]:
        """The domain's two least loaded nodes."""
        heap = self.heaps[domain]
        if len(heap) > 2 * self.counts[domain] + 16:
            heap[:] = [i for i in heap if valid(shape, i)]
            heapq.heapify(heap)
        found: list[HeapItem] = []
        while heap and len(found) < 2:
            item = heapq.heappop(heap)
            if valid(shape, item):
                found.append(item)
        for item in found:
            heapq.heappush(heap, item)
        return found


def domains_of(
    shape: ShapeHeap,
    keys: tuple[str, ...],
    matchers: tuple[PodMatcher | None, ...],
    ctx: CycleContext,
) -> Domains:
    domains = shape.domains.get((keys, matchers))
    if domains is None:
        if len(shape.domains) >= MAX_DOMAIN_KEYS:
            shape.domains.clear()
        domains = shape.domains[(keys, matchers)] = Domains(keys, matchers)
        state = ctx.state
        for name, entry in shape.entries.items():
            if entry.item is not None and entry.item.tier == 0:
                domains.add(state.nodes[name], entry.item, state)
    return domains


def top(shape: ShapeHeap) -> HeapItem | None:
    heap = shape.heap
    while heap:
        if valid(shape, heap[0]):
            return heap[0]
        heapq.heappop(heap)
    return None


def valid(shape: ShapeHeap, item: HeapItem) -> bool:
    entry = shape.entries.get(item.node)
    return entry is not None and entry.seq == item.seq
