"""ScoreIndex: schedule_one's answer for most pods without visiting every node per pod, and
for the others without re-running the node-local filters and load scores on every node.

For a pod whose constraints are all node-local (no inter-pod affinity or anti-affinity, none of
the placed pods' anti-affinity aimed at it, no topology spread, no preferred node affinity, no
PreferNoSchedule taint it does not tolerate), a node's verdict and load score depend only on that
node's own state and on the pod's *shape*: its requests, tolerations, node selector and required
node affinity, host ports and policy. Pods of one shape share a heap of the nodes, ranked exactly
as schedule_one ranks them (cool nodes by load score, then hot ones by measured load). The cluster
state logs which nodes changed, and only those are re-evaluated, so a pod usually costs a couple
of node evaluations instead of one per node. The heap is rebuilt when the policy or the metrics
snapshot changes, or when a sample it used goes stale. Any other pod (spread, inter-pod
affinity, preferences, claims) takes each node's node-local verdict and load score from its
shape's entries and runs only the checks that depend on other pods, on as few nodes as give
the same answer: in load order until two pass, or only the hosts its local PVs allow, or, when
neither settles it, every node.
`tests/unit/framework/test_index.py` checks the answers against schedule_one on random clusters.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterable, Iterator

from . import by_domain, podaffinity, spread
from .context import Basis, CycleContext
from .cycle import (
    Decision,
    NodeDiagnosis,
    Unschedulable,
    conclude,
    failure_message,
    invalid,
    prefilter,
    refusal,
    select,
)
from .heat import expires_at, is_fresh
from .plugin import UNSIGNABLE
from .profile import DEFAULT_PROFILE, Profile, Shape
from .shapes import Entry, HeapItem, ShapeHeap, domains_of, top, valid
from .types import PodInfo
from .view import ClusterView

MAX_SHAPES = 16  # heaps kept, least recently used dropped first
# Nodes a constrained pod without preferences visits in its shape's order before it gives up
# and visits every node (few pass the inter-pod checks, or none, which needs every reason):
# this many, or a quarter of the nodes if more (a pop costs a few filter calls).
WALK_LIMIT = 64


def node_local(pod: PodInfo, state: ClusterView, profile: Profile = DEFAULT_PROFILE) -> bool:
    """True when every node's verdict and score depend on that node alone (every plugin signs
    the pod; see plugin.py)."""
    return profile.batchable(CycleContext(pod, state))


class ScoreIndex:
    def __init__(self, profile: Profile = DEFAULT_PROFILE) -> None:
        self.profile = profile
        self.filters = profile.local_filters
        self.inter_pod = profile.inter_pod_filters
        self.preferences = tuple(p for p in profile.scorers if not p.node_local)
        self._shapes: OrderedDict[Shape, ShapeHeap] = OrderedDict()
        self._seq = itertools.count()
        self.evaluations = 0  # node evaluations, for tests and profiling

    def schedule(
        self,
        pod: PodInfo,
        state: ClusterView,
        basis: Basis,
    ) -> Decision | Unschedulable:
        """schedule_one's result. The basis's learned usage changes only with a refresh,
        which replaces its samples too: a heap built on both stays valid while the samples
        are the same object."""
        if pod.invalid_reason:
            return invalid(pod)
        # One context: its PreFilter data serves signing and the inter-pod checks.
        ctx = CycleContext(pod, state, basis)
        policy = basis.policy
        profile = self.profile
        rejected = prefilter(ctx, profile)
        if rejected is not None:
            return rejected
        shape = self._current(profile.shape(ctx, policy), ctx)
        if not profile.batchable(ctx):
            return self._constrained(shape, ctx)
        best = top(shape)
        if best is None:
            return Unschedulable(failure_message(len(state.nodes), +shape.reasons), +shape.reasons)
        candidates = [best]
        if best.tier == 0:  # the runner-up, if cool (a hot one is passed over)
            heapq.heappop(shape.heap)
            second = top(shape)
            heapq.heappush(shape.heap, best)
            if second is not None and second.tier == 0:
                candidates.append(second)
        return self._select(shape, ctx, candidates, shape.hot)

    def _select(
        self,
        shape: ShapeHeap,
        ctx: CycleContext,
        items: list[HeapItem],
        hot: int,
        scores: list[tuple[float, list[float]]] | None = None,
    ) -> Decision:
        """The cycle's own `select` over candidate nodes (heap items) known to hold the best
        two, with their cached load scores; `hot` counts every feasible hot node."""
        load = []
        for item in items:
            score = shape.entries[item.node].score
            if score is None:  # only a feasible entry has a heap item: nodes and scores align
                raise RuntimeError(f"score index: a heap item for infeasible node {item.node}")
            load.append(score)
        nodes = ctx.state.nodes
        return select(
            ctx,
            [nodes[item.node] for item in items],
            load,
            self.profile,
            hot_feasible=hot,
            scores=scores or [],
        )

    def _constrained(self, shape: ShapeHeap, ctx: CycleContext) -> Decision | Unschedulable:
        """A pod with inter-pod constraints, claims or preferences: each node's node-local
        verdict and load score come from the shape's entries; only the checks that depend on
        other pods (spread, inter-pod affinity, volumes) run here, after the node-local ones,
        as in kube-scheduler's order, on the nodes a fast path needs (the walk, by domain) or
        else every node. The conclusion is the full cycle's. A pod some filter narrows to a
        few hostnames (local PVs; kube-scheduler's PreFilterResult) is decided on those nodes
        alone: every other node is one that filter refuses, so the feasible nodes and the
        decision are the full visit's. Every node is visited when none of them fits, for
        kube-scheduler's failure message."""
        # The preferences that apply: scorers that are not node-local sign the pod UNSIGNABLE
        # exactly then. With none, the load score alone ranks the feasible nodes.
        preferring = [p for p in self.preferences if p.sign(ctx) is UNSIGNABLE]
        names = self._narrowed(ctx)
        if preferring:
            found = by_domain.spread_by_domain(
                shape, ctx, preferring, self.inter_pod
            ) or by_domain.affinity_by_domain(shape, ctx, preferring, self.inter_pod)
            if found is not None:
                return self._by_domain(shape, ctx, found)
            if names is not None:
                diagnoses = self._diagnose(shape, ctx, names)
                if any(d.load is not None for d in diagnoses):
                    return conclude(ctx, diagnoses, self.profile)
        else:
            walked = (
                self._walk(shape, ctx) if names is None else self._walk_within(shape, ctx, names)
            )
            if walked is not None:
                return walked
        return conclude(ctx, self._diagnose(shape, ctx, shape.entries), self.profile)

    def _narrowed(self, ctx: CycleContext) -> list[str] | None:
        """The nodes some filter narrows the pod to (their hostnames), or None."""
        hosts = self.profile.only_hostnames(ctx)
        if hosts is None:
            return None
        return list(ctx.state.with_hostnames(hosts))

    def _diagnose(
        self, shape: ShapeHeap, ctx: CycleContext, names: Iterable[str]
    ) -> list[NodeDiagnosis]:
        """The nodes' verdicts and load scores: node-local from the shape, the rest here."""
        nodes, entries = ctx.state.nodes, shape.entries
        diagnoses = []
        for name in names:
            node, entry = nodes[name], entries[name]
            if entry.score is None:
                diagnoses.append(NodeDiagnosis(node, entry.reasons))
                continue
            failed = refusal(ctx, node, self.inter_pod)
            if failed:
                diagnoses.append(NodeDiagnosis(node, failed[1]))
            else:
                diagnoses.append(NodeDiagnosis(node, (), entry.score))
        return diagnoses

    def _walk(self, shape: ShapeHeap, ctx: CycleContext) -> Decision | None:
        """A constrained pod that only the load score ranks: the shape's heap already orders
        the nodes as the load plugin does (cool by score, then hot by measured load), so the
        first nodes in that order to pass the inter-pod checks are the chosen one and the
        runner-up; hot nodes are counted apart. None when the walk limit is reached or none
        passes (the caller then visits every node)."""
        heap = shape.heap
        limit = max(WALK_LIMIT, len(shape.entries) // 4)
        apart = self._walk_apart(shape, ctx, limit)
        if apart:
            return self._select(shape, ctx, apart, self._hot_passing(ctx, shape.hot_names))
        popped: list[HeapItem] = []

        def in_order() -> Iterator[HeapItem]:
            while heap and len(popped) < limit:
                item = heapq.heappop(heap)
                if valid(shape, item):  # a superseded one is dropped for good
                    popped.append(item)
                    yield item

        try:
            found, decided = self._first_passing(ctx, in_order())
            limited = not decided and bool(heap)  # too few pass in the first nodes
        finally:
            for item in popped:
                heapq.heappush(heap, item)
        if limited:
            return None
        return self._chosen(shape, ctx, found, shape.hot_names)

    def _walk_within(
        self, shape: ShapeHeap, ctx: CycleContext, names: list[str]
    ) -> Decision | None:
        """`_walk` over the nodes a filter narrows the pod to, in the same order: their
        heap items alone, so a pod costs about as many nodes as it has candidates. With local
        PVs on a third of 15,000 nodes, the walk over every node failed once the coolest
        nodes' PVs were taken, and each pod visited every node
        (bench/results/2026-11-27/README.md)."""
        entries = shape.entries  # every node's (the shape is current)
        items = [item for name in names if (item := entries[name].item) is not None]
        heapq.heapify(items)

        def in_order() -> Iterator[HeapItem]:
            while items:
                yield heapq.heappop(items)

        found, _ = self._first_passing(ctx, in_order())
        hot = shape.hot_names
        return self._chosen(shape, ctx, found, [name for name in names if name in hot])

    def _first_passing(
        self, ctx: CycleContext, ordered: Iterator[HeapItem]
    ) -> tuple[list[HeapItem], bool]:
        """The first cool nodes in the load plugin's order to pass the inter-pod checks, up
        to two, or the first hot one when no cool one passes (hot ones are passed over while
        a cool one fits); and whether that was settled before `ordered` ran out."""
        nodes, inter_pod = ctx.state.nodes, self.inter_pod
        cool: list[HeapItem] = []
        for item in ordered:
            if item.tier == 1 and cool:
                return cool, True
            if refusal(ctx, nodes[item.node], inter_pod):
                continue
            if item.tier == 1:
                return [item], True
            cool.append(item)
            if len(cool) == 2:
                return cool, True
        return cool, False

    def _chosen(
        self, shape: ShapeHeap, ctx: CycleContext, found: list[HeapItem], hot: Iterable[str]
    ) -> Decision | None:
        """The decision among what `_first_passing` found, or None when nothing passed (the
        failure message needs every node's reasons). `hot`: the feasible hot nodes to count
        (passed over) where they pass the inter-pod checks; none when every one is hot."""
        if not found:
            return None
        if found[0].tier == 1:  # every feasible node is hot: the least loaded is taken
            return self._select(shape, ctx, found, 0)
        return self._select(shape, ctx, found, self._hot_passing(ctx, hot))

    def _hot_passing(self, ctx: CycleContext, names: Iterable[str]) -> int:
        """How many of these feasible hot nodes pass the inter-pod checks too."""
        nodes, inter_pod = ctx.state.nodes, self.inter_pod
        return sum(1 for name in names if not refusal(ctx, nodes[name], inter_pod))

    def _walk_apart(self, shape: ShapeHeap, ctx: CycleContext, limit: int) -> list[HeapItem]:
        """kube-scheduler's hostname fast path, for a pod with required anti-affinity by
        hostname: a node with pods those terms match on itself is refused, and such nodes
        pile up at the top of the shape's heap (one pod each barely changes a score). The
        shape's cool nodes are grouped by how many such pods they hold (a pod placed or gone
        re-evaluates its node), and only the groups with none are walked, in order; every
        check still runs on the nodes visited. The best one or two cool nodes that pass, or
        none when this does not apply, the limit is reached or none passes."""
        terms = [t for t in ctx.pod.anti_affinity_terms if t.topology_key == spread.HOSTNAME]
        if not terms or shape.feasible == shape.hot:
            return []
        matchers = tuple(podaffinity.TermsMatch((t,)) for t in terms)
        if any(m.reads_namespace_labels for m in matchers):
            return []  # a namespace relabel changes matches without touching any node
        domains = domains_of(shape, (spread.HOSTNAME,), matchers, ctx)
        nodes, inter_pod = ctx.state.nodes, self.inter_pod
        found: list[HeapItem] = []
        for domain in list(domains.counts):
            if domain[0] is True and any(domain[1:]):
                continue  # every node here holds a pod its anti-affinity refuses
            passing = domains.first_passing(
                domain, shape, lambda name: not refusal(ctx, nodes[name], inter_pod), limit
            )
            if passing is None:
                return []
            found.extend(passing)
        found.sort()
        return found[:2]

    def _by_domain(
        self, shape: ShapeHeap, ctx: CycleContext, found: by_domain.ByDomain
    ) -> Decision:
        """The decision when one preference scores every node of a domain alike (`shares`,
        normalised, for the domains whose nodes are feasible): only each domain's two least
        loaded nodes can be chosen or runner-up, so they are the candidates."""
        items: list[HeapItem] = []
        values: list[float] = []
        for domain, share in found.shares.items():
            least = found.domains.least_loaded(domain, shape)
            items.extend(least)
            values.extend(share for _ in least)
        return self._select(shape, ctx, items, found.hot, [(found.weight, values)])

    def _current(self, key: Shape, ctx: CycleContext) -> ShapeHeap:
        """The shape's heap, brought up to date with the cluster state."""
        state, policy, samples, now = ctx.state, ctx.policy, ctx.samples, ctx.now
        shape = self._shapes.get(key)
        if (
            shape is None
            or shape.policy is not policy
            or shape.samples is not samples
            or shape.epoch != state.change_epoch
            or now >= shape.stale_at
        ):
            stale_at = min(
                (expires_at(s, policy) for s in samples.values() if is_fresh(s, policy, now)),
                default=float("inf"),
            )
            shape = ShapeHeap(policy, samples, state.change_epoch, len(state.changes), stale_at)
            self._shapes[key] = shape
            if len(self._shapes) > MAX_SHAPES:
                self._shapes.popitem(last=False)
            for name in state.nodes:
                self._evaluate(shape, name, ctx)
        else:
            self._shapes.move_to_end(key)
            changed = state.changes[shape.cursor :]
            shape.cursor = len(state.changes)
            for name in dict.fromkeys(changed):
                self._evaluate(shape, name, ctx)
            if len(shape.heap) > 2 * len(shape.entries) + 64:  # drop superseded items
                shape.heap = [i for i in shape.heap if valid(shape, i)]
                heapq.heapify(shape.heap)
        return shape

    def _evaluate(self, shape: ShapeHeap, name: str, ctx: CycleContext) -> None:
        old = shape.entries.pop(name, None)
        if old is not None:
            if old.score is None:
                shape.reasons.subtract(old.reasons)
            else:
                shape.feasible -= 1
                shape.hot -= old.score.hot
                shape.hot_names.discard(name)
                for domains in shape.domains.values():
                    domains.discard(name)
        node = ctx.state.nodes.get(name)
        if node is None:
            return
        self.evaluations += 1
        seq = next(self._seq)
        failed = refusal(ctx, node, self.filters)
        if failed:
            shape.entries[name] = Entry(seq, None, failed[1])
            shape.reasons.update(failed[1])
            return
        score = self.profile.load.load(ctx, node)
        shape.feasible += 1
        shape.hot += score.hot
        tier, rank = self.profile.load.order(ctx, score)
        item = HeapItem(tier, rank, ctx.rng.random(), seq, name)
        if tier:
            shape.hot_names.add(name)
        else:
            for domains in shape.domains.values():
                domains.add(node, item, ctx.state)
        shape.entries[name] = Entry(seq, score, [], item)
        heapq.heappush(shape.heap, item)
