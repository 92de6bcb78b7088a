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
affinity, preferences) still visits every node, but takes each node's node-local verdict and
load score from its shape's entries and runs only the checks that depend on other pods.
`tests/unit/test_index.py` checks the answers against schedule_one on random clusters.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ..metrics.cache import NodeSample
from ..policy import Policy
from . import podaffinity, spread
from .context import CycleContext
from .cycle import (
    Decision,
    NodeDiagnosis,
    Unschedulable,
    conclude,
    failure_message,
    first_failure,
    load,
)
from .plugin import AFFINITY_BY_DOMAIN, HOSTNAME_APART, SPREAD_BY_DOMAIN, UNSIGNABLE, ScorePlugin
from .plugins.inter_pod_affinity import preference_share
from .profile import DEFAULT_PROFILE, Profile, Shape
from .scoring import LOAD_WEIGHT, MAX_SCORE, NodeScore, UsageProfiles, weighted_load
from .types import NodeInfo, PodInfo
from .view import ClusterView, PodMatcher

MAX_SHAPES = 16  # heaps kept, least recently used dropped first
# Nodes a constrained pod without preferences visits in its shape's order before it gives up
# and visits every node (few pass the inter-pod checks, or none, which needs every reason):
# this many, or a quarter of the nodes if more (a pop costs a few filter calls).
WALK_LIMIT = 64

# (tier, rank, tie-break, seq, node): tier 0 = cool (rank = -score), 1 = hot (rank = load)
HeapItem = tuple[int, float, float, int, str]
# A node's values of some topology keys, then its own matching pods for some selectors.
Domain = tuple[str | bool | int | None, ...]
MAX_DOMAIN_KEYS = 16  # combinations of keys and selectors tracked per shape


@dataclass(slots=True)
class _Entry:
    seq: int
    score: NodeScore | None  # None: infeasible
    reasons: list[str]
    item: HeapItem | None = None  # its heap item, when feasible


@dataclass(slots=True)
class _ShapeHeap:
    policy: Policy
    samples: Mapping[str, NodeSample]
    epoch: int
    cursor: int
    stale_at: float  # the first time a sample used here stops being fresh
    entries: dict[str, _Entry] = field(default_factory=dict)
    heap: list[HeapItem] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    feasible: int = 0
    hot: int = 0
    hot_names: set[str] = field(default_factory=set)  # feasible hot nodes
    # Cool feasible nodes per domain, for the topology keys spread pods asked about.
    domains: dict[tuple[tuple[str, ...], tuple[PodMatcher | None, ...]], _Domains] = field(
        default_factory=dict
    )


@dataclass(slots=True)
class _Domains:
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
        self, domain: Domain, shape: _ShapeHeap, passes: Callable[[str], bool], limit: int
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
                if not _valid(shape, item):
                    continue
                kept.append(item)
                if passes(item[4]):
                    found.append(item)
        finally:
            for item in kept:
                heapq.heappush(heap, item)
        return found

    def least_loaded(self, domain: Domain, shape: _ShapeHeap) -> list[NodeScore]:
        """The domain's two best load scores."""
        heap = self.heaps[domain]
        if len(heap) > 2 * self.counts[domain] + 16:
            heap[:] = [i for i in heap if _valid(shape, i)]
            heapq.heapify(heap)
        found: list[NodeScore] = []
        kept: list[HeapItem] = []
        while heap and len(found) < 2:
            item = heapq.heappop(heap)
            if not _valid(shape, item):
                continue
            kept.append(item)
            score = shape.entries[item[4]].score
            assert score is not None
            found.append(score)
        for item in kept:
            heapq.heappush(heap, item)
        return found


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
        self._shapes: OrderedDict[Shape, _ShapeHeap] = OrderedDict()
        self._seq = itertools.count()
        self.evaluations = 0  # node evaluations, for tests and profiling

    def schedule(
        self,
        pod: PodInfo,
        state: ClusterView,
        policy: Policy,
        samples: Mapping[str, NodeSample],
        now: float,
        rng: random.Random,
        learned: UsageProfiles | None = None,
    ) -> Decision | Unschedulable | None:
        """schedule_one's result; None for a pod it cannot judge (invalid). `learned` changes
        only with a refresh, which replaces `samples` too: a heap built on both stays valid
        while `samples` is the same object."""
        if pod.invalid_reason:
            return None
        # One context: its PreFilter data serves signing and the inter-pod checks.
        ctx = CycleContext(pod, state, policy, samples, now, rng, learned)
        profile = self.profile
        shape = self._current(profile.shape(ctx, policy), ctx)
        if not profile.batchable(ctx):
            return self._constrained(shape, ctx)
        best = self._top(shape)
        if best is None:
            return Unschedulable(failure_message(len(state.nodes), +shape.reasons), +shape.reasons)
        chosen = shape.entries[best[4]].score
        assert chosen is not None
        chosen = _aged(chosen, ctx)
        if best[0] == 1:  # every feasible node is hot: the least loaded is taken
            top = _normalised(chosen.score, chosen.score)
            return Decision(chosen.node, top, [(top, chosen)], policy.name, 0, True)
        ranked = [(_normalised(chosen.score, chosen.score), chosen)]
        heapq.heappop(shape.heap)
        second = self._top(shape)
        heapq.heappush(shape.heap, best)
        if second is not None and second[0] == 0:
            runner = shape.entries[second[4]].score
            assert runner is not None
            ranked.append((_normalised(runner.score, chosen.score), runner))
        return Decision(chosen.node, ranked[0][0], ranked, policy.name, shape.hot, False)

    def _constrained(self, shape: _ShapeHeap, ctx: CycleContext) -> Decision | Unschedulable:
        """A pod with inter-pod constraints or preferences: every node is visited, but its
        node-local verdict and load score come from the shape's entries; only the checks that
        depend on other pods (spread, inter-pod affinity) run here, after the node-local ones,
        as in kube-scheduler's order. The conclusion is the full cycle's."""
        # The preferences that apply: scorers that are not node-local sign the pod UNSIGNABLE
        # exactly then. With none, the load score alone ranks the feasible nodes.
        preferring = [p for p in self.preferences if p.sign(ctx) is UNSIGNABLE]
        walked = (
            (
                self._walk_spread(shape, ctx, preferring)
                or self._walk_affinity(shape, ctx, preferring)
            )
            if preferring
            else self._walk(shape, ctx)
        )
        if walked is not None:
            return walked
        nodes = ctx.state.nodes
        diagnoses = []
        for name, entry in shape.entries.items():
            node = nodes[name]
            if entry.score is None:
                diagnoses.append(NodeDiagnosis(node, entry.reasons))
                continue
            failed = first_failure(ctx, node, self.inter_pod)
            diagnoses.append(NodeDiagnosis(node, failed or (), None if failed else entry.score))
        return conclude(ctx, diagnoses, self.profile)

    def _walk(self, shape: _ShapeHeap, ctx: CycleContext) -> Decision | None:
        """A constrained pod that only the load score ranks: the shape's heap already orders
        the nodes as the full cycle would (cool by score, then hot by measured load), so the
        first nodes in that order to pass the inter-pod checks are the chosen one and the
        runner-up; hot nodes are counted apart. None when the walk limit is reached or none
        passes (the caller then visits every node)."""
        nodes, heap, inter_pod = ctx.state.nodes, shape.heap, self.inter_pod
        limit = max(WALK_LIMIT, len(shape.entries) // 4)
        apart = self._walk_apart(shape, ctx, limit)
        if apart:
            return self._ranked(shape, ctx, apart)
        popped: list[HeapItem] = []
        cool: list[NodeScore] = []
        least_hot: NodeScore | None = None
        try:
            while heap and len(popped) < limit:
                item = heapq.heappop(heap)
                if not _valid(shape, item):
                    continue  # superseded: dropped for good
                popped.append(item)
                if item[0] == 1 and cool:
                    break  # a cool node passed: hot ones are passed over
                if first_failure(ctx, nodes[item[4]], inter_pod):
                    continue
                score = shape.entries[item[4]].score
                assert score is not None
                if item[0] == 1:
                    least_hot = score
                    break
                cool.append(score)
                if len(cool) == 2:
                    break
            else:
                if heap:  # the walk limit: too few pass in the first nodes
                    return None
        finally:
            for item in popped:
                heapq.heappush(heap, item)
        if least_hot is not None:  # every feasible node is hot: the least loaded is taken
            top = _normalised(least_hot.score, least_hot.score)
            chosen = _aged(least_hot, ctx)
            return Decision(chosen.node, top, [(top, chosen)], ctx.policy.name, 0, True)
        if not cool:
            return None  # nothing fits: the failure message needs every node's reasons
        return self._ranked(shape, ctx, cool)

    def _ranked(self, shape: _ShapeHeap, ctx: CycleContext, cool: list[NodeScore]) -> Decision:
        """The decision from the best one or two cool nodes that pass, in the shape's order."""
        nodes, inter_pod = ctx.state.nodes, self.inter_pod
        best = cool[0].score
        ranked = [(_normalised(s.score, best), s) for s in cool]
        ranked[0] = (ranked[0][0], _aged(cool[0], ctx))
        hot = sum(1 for name in shape.hot_names if not first_failure(ctx, nodes[name], inter_pod))
        return Decision(cool[0].node, ranked[0][0], ranked, ctx.policy.name, hot, False)

    def _walk_apart(self, shape: _ShapeHeap, ctx: CycleContext, limit: int) -> list[NodeScore]:
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
        domains = self._domains(shape, (spread.HOSTNAME,), matchers, ctx)
        nodes, inter_pod = ctx.state.nodes, self.inter_pod
        found: list[HeapItem] = []
        for domain in list(domains.counts):
            if domain[0] is True and any(domain[1:]):
                continue  # every node here holds a pod its anti-affinity refuses
            passing = domains.first_passing(
                domain, shape, lambda name: not first_failure(ctx, nodes[name], inter_pod), limit
            )
            if passing is None:
                return []
            found.extend(passing)
        found.sort()
        cool = [shape.entries[item[4]].score for item in found[:2]]
        return [score for score in cool if score is not None]

    def _walk_spread(
        self, shape: _ShapeHeap, ctx: CycleContext, preferring: list[ScorePlugin]
    ) -> Decision | None:
        """A pod that every node passing the node-local filters fits, ranked by load and
        ScheduleAnyway spreading alone: the spread scores' normalisation (lowest and highest
        raw score, domains, nodes considered) comes from the shape's counts per domain, where a
        domain is a combination of topology values and, for hostname constraints, matching
        pods on the node itself. A domain's nodes share a spread score, so only its two least
        loaded ones can be chosen or runner-up. The pod may have required anti-affinity by
        hostname too (a Deployment's replicas kept apart): its terms' matching pods on the node
        itself join the domain, and domains holding any are refused as a whole. None when this
        does not apply (the caller visits every node)."""
        pod, soft = ctx.pod, ctx.soft_spread
        if soft is None or shape.feasible == shape.hot:  # all hot: the full path decides
            return None
        apart = self._apart_only(ctx)
        if apart is None:
            return None  # an inter-pod filter may refuse nodes: the feasible set is not known
        if len(preferring) != 1 or preferring[0].fast_path != SPREAD_BY_DOMAIN:
            return None
        weight = preferring[0].weight_for(ctx)
        spread_keys = {c.topology_key for c in soft.constraints}
        keys = tuple(sorted(spread_keys | ({spread.HOSTNAME} if apart else set())))
        own = tuple(
            spread.SpreadMatch(pod.namespace, c.selector)
            if spread.matches_anything(c.selector)
            else None
            for c in soft.constraints
            if c.topology_key == spread.HOSTNAME
        )
        domains = self._domains(shape, keys, own + apart, ctx)
        require_all = not soft.system_default
        width, host = len(keys), keys.index(spread.HOSTNAME) if apart else -1
        required = [i for i, key in enumerate(keys) if key in spread_keys]
        live = {
            domain: n
            for domain, n in domains.counts.items()
            if n > 0 and not (apart and domain[host] is True and any(domain[width + len(own) :]))
        }
        if not live:
            return None  # anti-affinity refuses every cool node: the full path decides
        counted = [
            (domain, n)
            for domain, n in live.items()
            if not (require_all and any(domain[i] is None or domain[i] is False for i in required))
        ]
        values = [
            ()
            if c.topology_key == spread.HOSTNAME
            else {_value(domain[keys.index(c.topology_key)]) for domain, _ in counted}
            for c in soft.constraints
        ]
        scorer = spread.SoftScorer(pod, ctx.state, soft, values, sum(n for _, n in counted))
        raw_of = {
            domain: scorer.raw_with(
                _labels(keys, domain[:width]), _counts(domain[width : width + len(own)])
            )
            for domain in live
        }
        raws = [raw for raw in raw_of.values() if raw is not None]
        low, high = min(raws, default=0), max(raws, default=0)
        # A domain's nodes share a spread score (0 where ignored, missing a key of the pod's
        # own constraints): its two least loaded are enough.
        shares = {domain: spread.normalized(raw, low, high) for domain, raw in raw_of.items()}
        hot = shape.hot
        if apart:  # hot nodes passed over are the feasible ones only: not those refused
            state = ctx.state
            refused = {
                name
                for matcher in apart
                for name, n in state.matching(matcher).items()
                if n and name in shape.hot_names and spread.HOSTNAME in state.nodes[name].labels
            }
            hot -= len(refused)
        return self._by_domain(shape, ctx, domains, shares, weight, hot)

    def _apart_only(self, ctx: CycleContext) -> tuple[PodMatcher, ...] | None:
        """() when no inter-pod filter applies to the pod; when the only one that does is
        anti-affinity by hostname (the pod's own required terms, placed pods' terms aimed at
        it, or both: no affinity, no spread filter), matchers of the pods on a node that make
        it refuse the pod: those its terms match, those carrying a term that matches it. None
        otherwise."""
        signing = [f for f in self.inter_pod if f.sign(ctx) is UNSIGNABLE]
        if not signing:
            return ()
        pod, state = ctx.pod, ctx.state
        if len(signing) != 1 or signing[0].fast_path != HOSTNAME_APART:
            return None
        if pod.affinity_terms:
            return None
        if any(t.topology_key != spread.HOSTNAME for t in pod.anti_affinity_terms):
            return None
        own = [podaffinity.TermsMatch((t,)) for t in pod.anti_affinity_terms]
        if any(m.reads_namespace_labels for m in own):
            return None  # a namespace relabel changes matches without touching any node
        aimed = [
            term
            for term, per_value in state.anti_affinity_domains()
            if per_value and term.matches(pod.namespace, pod.labels, state.namespaces)
        ]
        if any(t.topology_key != spread.HOSTNAME for t in aimed):
            return None
        matchers: tuple[PodMatcher, ...] = (*own, *(podaffinity.CarriesTerm(t) for t in aimed))
        return matchers or None

    def _walk_affinity(
        self, shape: _ShapeHeap, ctx: CycleContext, preferring: list[ScorePlugin]
    ) -> Decision | None:
        """A pod that every node passing the node-local filters fits, ranked by load and
        preferred inter-pod affinity alone, by topology keys other than hostname: a node's
        affinity score depends only on its values of those keys, so the cool nodes are grouped
        by them (the shape's domains) and each group's two least loaded are enough, the
        normalisation coming from the groups present. None when this does not apply."""
        scores = ctx.affinity_preference
        if scores is None or shape.feasible == shape.hot:
            return None
        if len(preferring) != 1 or preferring[0].fast_path != AFFINITY_BY_DOMAIN:
            return None
        if spread.HOSTNAME in scores or any(f.sign(ctx) is UNSIGNABLE for f in self.inter_pod):
            return None
        keys = tuple(sorted(scores))
        domains = self._domains(shape, keys, (), ctx)
        raw_of = {
            domain: sum(
                scores[key].get(value, 0)
                for key, value in zip(keys, domain, strict=True)
                if isinstance(value, str)
            )
            for domain, n in domains.counts.items()
            if n > 0
        }
        low, high = min(raw_of.values(), default=0), max(raw_of.values(), default=0)
        shares = {domain: preference_share(raw, low, high) for domain, raw in raw_of.items()}
        weight = preferring[0].weight_for(ctx)
        return self._by_domain(shape, ctx, domains, shares, weight, shape.hot)

    @staticmethod
    def _by_domain(
        shape: _ShapeHeap,
        ctx: CycleContext,
        domains: _Domains,
        shares: Mapping[Domain, float],
        weight: float,
        hot: int,
    ) -> Decision:
        """The decision when one preference scores every node of a domain alike (`shares`,
        normalised, for the domains whose nodes are feasible): each domain's two least loaded
        nodes, ranked as combine() adds load (normalised by the best among them) and
        preference up."""
        least = {domain: domains.least_loaded(domain, shape) for domain in shares}
        top = max(scores[0].score for scores in least.values() if scores)

        def total(score: NodeScore, share: float) -> float:
            load_share = _normalised(score.score, top)
            return (LOAD_WEIGHT * load_share + weight * share) / (LOAD_WEIGHT + weight)

        ranked = [
            (total(score, share), score)
            for domain, share in shares.items()
            for score in least[domain]
        ]
        ranked.sort(key=lambda pair: -pair[0])
        del ranked[2:]
        ranked[0] = (ranked[0][0], _aged(ranked[0][1], ctx))
        return Decision(ranked[0][1].node, ranked[0][0], ranked, ctx.policy.name, hot, False)

    @staticmethod
    def _domains(
        shape: _ShapeHeap,
        keys: tuple[str, ...],
        matchers: tuple[PodMatcher | None, ...],
        ctx: CycleContext,
    ) -> _Domains:
        domains = shape.domains.get((keys, matchers))
        if domains is None:
            if len(shape.domains) >= MAX_DOMAIN_KEYS:
                shape.domains.clear()
            domains = shape.domains[(keys, matchers)] = _Domains(keys, matchers)
            state = ctx.state
            for name, entry in shape.entries.items():
                if entry.item is not None and entry.item[0] == 0:
                    domains.add(state.nodes[name], entry.item, state)
        return domains

    def _current(self, key: Shape, ctx: CycleContext) -> _ShapeHeap:
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
            max_age = policy.spec.metrics.max_age_seconds
            stale_at = min(
                (s.timestamp + max_age for s in samples.values() if now - s.timestamp <= max_age),
                default=float("inf"),
            )
            shape = _ShapeHeap(policy, samples, state.change_epoch, len(state.changes), stale_at)
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
                shape.heap = [i for i in shape.heap if _valid(shape, i)]
                heapq.heapify(shape.heap)
        return shape

    def _evaluate(self, shape: _ShapeHeap, name: str, ctx: CycleContext) -> None:
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
        failed = first_failure(ctx, node, self.filters)
        if failed:
            shape.entries[name] = _Entry(seq, None, failed)
            shape.reasons.update(failed)
            return
        score = load(ctx, node)
        shape.feasible += 1
        shape.hot += score.hot
        item: HeapItem
        if score.hot:
            shape.hot_names.add(name)
            item = (1, weighted_load(shape.policy, score), ctx.rng.random(), seq, name)
        else:
            item = (0, -score.score, ctx.rng.random(), seq, name)
            for domains in shape.domains.values():
                domains.add(node, item, ctx.state)
        shape.entries[name] = _Entry(seq, score, [], item)
        heapq.heappush(shape.heap, item)

    @staticmethod
    def _top(shape: _ShapeHeap) -> HeapItem | None:
        heap = shape.heap
        while heap:
            if _valid(shape, heap[0]):
                return heap[0]
            heapq.heappop(heap)
        return None


def _valid(shape: _ShapeHeap, item: HeapItem) -> bool:
    entry = shape.entries.get(item[4])
    return entry is not None and entry.seq == item[3]


def _value(value: str | bool | int | None) -> str:
    """A node's value of a non-hostname key, "" when it lacks the key (as spread scores it)."""
    return value if isinstance(value, str) else ""


def _counts(domain: Domain) -> list[int]:
    """The own matching pods part of a domain."""
    return [v if isinstance(v, int) else 0 for v in domain]


def _labels(keys: tuple[str, ...], domain: Domain) -> dict[str, str]:
    """Labels of a node of this domain (from its values of `keys`; hostname present: "")."""
    return {
        key: value if isinstance(value, str) else ""
        for key, value in zip(keys, domain, strict=True)
        if value is not None and value is not False
    }


def _aged(score: NodeScore, ctx: CycleContext) -> NodeScore:
    """The score stands; the record shows the sample's age today."""
    if score.sample_age is None:
        return score
    return replace(score, sample_age=max(0.0, ctx.now - ctx.samples[score.node].timestamp))


def _normalised(score: float, top: float) -> float:
    """DefaultNormalizeScore with the best node's raw score as the maximum."""
    return score * MAX_SCORE / top if top > 0 else 0.0
