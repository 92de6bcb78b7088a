"""The cluster state's incremental match counts (per node, per domain of a node scope) and
topology values equal a recount from scratch after any sequence of placements, removals,
relabels, moves, deletions, namespace and node label or taint changes (a property test over
random sequences)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from loadwise.framework.podaffinity import TermsMatch, parse_terms
from loadwise.framework.selectors import parse_label_selector, parse_required_node_affinity
from loadwise.framework.spread import NodeScope, SpreadMatch
from loadwise.framework.taints import parse_tolerations
from loadwise.framework.types import NodeInfo, parse_pod
from loadwise.framework.view import PodMatcher
from loadwise.scheduler.state import ClusterState
from loadwise_dev import manifests

from ...helpers import recount_anti_terms

NAMESPACES = ("default", "team-a", "team-b")


def _matchers() -> list[PodMatcher]:
    web = parse_label_selector({"matchLabels": {"app": "web"}})
    not_db = parse_label_selector(
        {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}
    )
    assert web is not None and not_db is not None
    by_team = parse_terms(
        [
            {
                "labelSelector": {"matchLabels": {"app": "web"}},
                "namespaceSelector": {"matchLabels": {"team": "x"}},
                "topologyKey": "zone",
            }
        ],
        "default",
    )
    two = parse_terms(
        [
            {"labelSelector": {"matchLabels": {"tier": "1"}}, "topologyKey": "zone"},
            {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
        ],
        "team-a",
    )
    listed = parse_terms(
        [{"labelSelector": {}, "namespaces": ["team-a", "team-b"], "topologyKey": "zone"}],
        "default",
    )
    return [
        SpreadMatch("default", web),
        SpreadMatch("team-a", not_db),
        TermsMatch(by_team),
        TermsMatch(two),
        TermsMatch(listed),
    ]


def _pod(rng: random.Random, uid: str, node: str) -> Any:
    labels = {"app": rng.choice(["web", "db", "api"])}
    if rng.random() < 0.5:
        labels["tier"] = rng.choice("12")
    raw = manifests.pod(uid, namespace=rng.choice(NAMESPACES), labels=labels)
    raw["metadata"]["uid"] = uid
    raw["spec"]["nodeName"] = node
    if rng.random() < 0.2:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if rng.random() < 0.4:
        selector = {"matchLabels": {"app": rng.choice(["web", "db"])}}
        terms = [
            {"labelSelector": selector, "topologyKey": key}
            for key in rng.sample(["zone", "rack", "kubernetes.io/hostname"], rng.choice([1, 2]))
        ]
        raw["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}
        }
    return parse_pod(raw)


def _node(rng: random.Random, name: str) -> dict[str, Any]:
    labels = {"zone": rng.choice("ab")} if rng.random() < 0.8 else {}
    if rng.random() < 0.5:
        labels["rack"] = rng.choice("xyz")
    raw = manifests.node(name, labels=labels)
    if rng.random() < 0.3:
        raw["spec"]["taints"] = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    return raw


def _recount(state: ClusterState, matcher: PodMatcher) -> dict[str, int]:
    counts = Counter(
        pod.node_name for pod in state.pods.values() if matcher.matches(pod, state.namespaces)
    )
    return dict(counts)


def _per_domain(
    state: ClusterState, matcher: PodMatcher, key: str, scope: NodeScope
) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for pod in state.pods.values():
        node = state.nodes.get(pod.node_name)
        in_scope = node is not None and _included(node, scope)
        if node is not None and in_scope and matcher.matches(pod, state.namespaces):
            counts[node.labels.get(key, "")] += 1
    return dict(counts)


def _included(node: NodeInfo, scope: NodeScope) -> bool:
    """NodeScope.includes, written out again."""
    labels = node.labels
    if not all(k in labels for k in scope.keys):
        return False
    affinity = scope.affinity
    if affinity is not None and any(labels.get(k) != v for k, v in affinity.node_selector):
        return False
    tolerated = not node.taints or any(t.operator == "Exists" for t in scope.tolerations or ())
    return scope.tolerations is None or tolerated


def _values(state: ClusterState, scope: NodeScope) -> dict[str, set[str]]:
    nodes = [n for n in state.nodes.values() if _included(n, scope)]
    return {key: {n.labels[key] for n in nodes} for key in scope.keys}


def _anti_terms(state: ClusterState) -> dict[Any, dict[str, int]]:
    return {term: dict(per_value) for term, per_value in recount_anti_terms(state).items()}


def _scopes() -> list[NodeScope]:
    rack_x = parse_required_node_affinity({"nodeSelector": {"rack": "x"}})
    everything = parse_tolerations([{"operator": "Exists"}])
    return [
        NodeScope(frozenset()),
        NodeScope(frozenset({"zone"})),
        NodeScope(frozenset({"zone", "rack"})),
        NodeScope(frozenset({"zone"}), affinity=rack_x),
        NodeScope(frozenset({"zone"}), tolerations=()),
        NodeScope(frozenset(), affinity=rack_x, tolerations=everything),
    ]


@pytest.mark.parametrize("seed", range(30))
def test_incremental_counts_equal_a_recount(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState()
    state._matches.limit = 3  # fewer than the matchers: some are dropped and counted again
    matchers = _matchers()
    for n in range(6):
        state.upsert_node(_node(rng, f"n{n}"))
    for namespace in NAMESPACES:
        state.upsert_namespace(namespace, {"team": rng.choice("xy")})
    scopes = _scopes()
    uids: list[str] = []
    for step in range(300):
        action = rng.random()
        if action < 0.35 or not uids:
            uid = f"p{step}"
            pod = _pod(rng, uid, f"n{rng.randrange(8)}")  # n6, n7: nodes that do not exist
            if rng.random() < 0.5:
                node = pod.node_name
                pod.node_name = ""
                state.assume(pod, node)
            else:
                state.observe_bound(pod, terminal=False)
            uids.append(uid)
        elif action < 0.5:
            state.remove_pod(uids.pop(rng.randrange(len(uids))))
        elif action < 0.7:  # relabelled, marked deleting, or moved: a fresh object
            uid = rng.choice(uids)
            old = state.pods[uid]
            node = old.node_name if rng.random() < 0.7 else f"n{rng.randrange(8)}"
            state.observe_bound(_pod(rng, uid, node), terminal=rng.random() < 0.1)
            if uid not in state.pods:
                uids.remove(uid)
        elif action < 0.8:
            state.upsert_namespace(rng.choice(NAMESPACES), {"team": rng.choice("xy")})
        elif action < 0.9:
            state.upsert_node(_node(rng, f"n{rng.randrange(8)}"))
        else:
            state.delete_node(f"n{rng.randrange(8)}")
        for matcher in rng.sample(matchers, 2):  # asked at random times, so tracked mid-way
            assert dict(state.matching(matcher)) == _recount(state, matcher), (step, matcher)
            key, scope = rng.choice(["zone", "rack"]), rng.choice(scopes)
            expected = _per_domain(state, matcher, key, scope)
            assert dict(state.matching_domains(matcher, key, scope)) == expected, step
        anti = {term: dict(per_value) for term, per_value in state.anti_affinity_domains()}
        assert anti == _anti_terms(state), step
        scope = rng.choice(scopes)
        values = state.topology_values(scope)
        assert {k: set(v) for k, v in values.items()} == _values(state, scope)
    for matcher in matchers:
        assert dict(state.matching(matcher)) == _recount(state, matcher)
