"""ScoreIndex against schedule_one: the same verdicts and the same best scores, on random
clusters that change between pods (placements, deletions, node updates, metrics refreshes,
samples going stale). Ties may be broken differently, so the checks compare scores, not names."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, Unschedulable, schedule_one
from loadwise.framework.index import ScoreIndex, node_local
from loadwise.framework.plugin import Inputs
from loadwise.framework.plugins import DEFAULT_PLUGINS
from loadwise.framework.plugins.node_ports import NodePorts
from loadwise.framework.profile import DEFAULT_PROFILE, Profile
from loadwise.framework.scoring import weighted_load
from loadwise.framework.spread import NodeScope
from loadwise.framework.types import PodInfo, parse_pod
from loadwise.policies.policy import Policy, parse_spec
from loadwise.scheduler.state import ClusterState
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import owned_by_replicaset, pod_info, recount_anti_terms, recount_weighted_terms

POLICIES = [
    Policy("even", parse_spec({})),
    Policy("cpu", parse_spec({"weights": {"cpu": 3, "memory": 1}, "placementEstimate": 2})),
    Policy("requests", parse_spec({"loadShare": 0})),
]


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    raw = manifests.node(
        name,
        cpu=rng.choice(["1", "2", "4"]),
        memory=rng.choice(["1Gi", "4Gi"]),
        pods=rng.choice([3, 10, 110]),
        labels={"zone": rng.choice("ab"), "disk": rng.choice(["ssd", "hdd"])},
        unschedulable=rng.random() < 0.1,
        ready=rng.random() > 0.05,
    )
    if rng.random() < 0.2:
        raw["spec"]["taints"] = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    elif rng.random() < 0.02:
        raw["spec"]["taints"] = [{"key": "spot", "value": "", "effect": "PreferNoSchedule"}]
    return raw


def random_pod(rng: random.Random, i: int) -> PodInfo:
    raw = manifests.pod(
        f"p{i}",
        cpu=rng.choice(["100m", "500m", "1"]),
        memory=rng.choice(["128Mi", "1Gi"]),
        labels={"app": rng.choice("xyyyy")},
    )
    raw["metadata"]["uid"] = f"uid-{i}"
    spec = raw["spec"]
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"disk": "ssd"}
    if rng.random() < 0.3:
        spec["tolerations"] = [{"operator": "Exists"}]
    if rng.random() < 0.15:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                "labelSelector": {"matchLabels": {"app": "y"}},
            }
        ]
    if rng.random() < 0.1:
        preferred = [
            {
                "weight": 5,
                "preference": {
                    "matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]
                },
            }
        ]
        spec["affinity"] = {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
        }
    if rng.random() < 0.15:
        spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    if rng.random() < 0.03:  # placed, it repels app=x pods from its zone
        term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    return parse_pod(raw)


def random_heavy_pod(rng: random.Random, i: int) -> PodInfo:
    """Spread and inter-pod affinity of every kind, often several at once; some pods owned by
    a ReplicaSet (system default spreading)."""
    app = rng.choice("xy")
    raw = manifests.pod(f"h{i}", cpu=rng.choice(["100m", "500m"]), labels={"app": app})
    raw["metadata"]["uid"] = f"uid-h{i}"
    spec = raw["spec"]
    if rng.random() < 0.3:
        owned_by_replicaset(raw)
    if rng.random() < 0.2:
        spec["nodeSelector"] = {"disk": "ssd"}
    if rng.random() < 0.2:
        spec["tolerations"] = [{"operator": "Exists"}]
    constraints = []
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        constraint: dict[str, Any] = {
            "maxSkew": rng.choice([1, 1, 2]),
            "topologyKey": rng.choice(["zone", "kubernetes.io/hostname"]),
            "whenUnsatisfiable": rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
            "labelSelector": rng.choice([{"matchLabels": {"app": app}}, {"matchLabels": {}}]),
        }
        if rng.random() < 0.2:
            constraint["minDomains"] = 3
            constraint["whenUnsatisfiable"] = "DoNotSchedule"
        if rng.random() < 0.3:
            constraint["nodeTaintsPolicy"] = "Honor"
        if rng.random() < 0.2:
            constraint["nodeAffinityPolicy"] = "Ignore"
        constraints.append(constraint)
    if constraints:
        spec["topologySpreadConstraints"] = constraints
    affinity: dict[str, Any] = {}
    if rng.random() < 0.3:
        key = rng.choice(["zone", "kubernetes.io/hostname"])
        term = {"labelSelector": {"matchLabels": {"app": rng.choice("xy")}}, "topologyKey": key}
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if rng.random() < 0.2:
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "zone"}
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    for kind in ("podAffinity", "podAntiAffinity"):
        if rng.random() < 0.2:  # preferred, by zone or host, for its own app or the other
            key = rng.choice(["zone", "kubernetes.io/hostname"])
            selector = {"matchLabels": {"app": rng.choice("xy")}}
            weighted = {
                "weight": rng.choice([1, 10, 100]),
                "podAffinityTerm": {"labelSelector": selector, "topologyKey": key},
            }
            affinity.setdefault(kind, {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
                weighted
            ]
    if affinity:
        spec["affinity"] = affinity
    return parse_pod(raw)


class Recounted:
    """The state, but every match count and topology value recounted from scratch: the full
    cycle reads this, so the index's answers are checked against counts kept by no one."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    def matching(self, matcher: Any) -> dict[str, int]:
        state = self._state
        pods = state.pods.values()
        return dict(Counter(p.node_name for p in pods if matcher.matches(p, state.namespaces)))

    def matching_domains(self, matcher: Any, key: str, scope: NodeScope) -> Counter[str]:
        nodes = self._state.nodes
        out: Counter[str] = Counter()
        for name, matches in self.matching(matcher).items():
            node = nodes.get(name)
            if node is not None and scope.includes(node):
                out[node.labels.get(key, "")] += matches
        return out

    def anti_affinity_domains(self) -> list[tuple[Any, Counter[str]]]:
        return list(recount_anti_terms(self._state).items())

    def weighted_affinity_domains(self) -> list[tuple[Any, int, Counter[str]]]:
        return recount_weighted_terms(self._state)

    def topology_values(self, scope: NodeScope) -> dict[str, set[str]]:
        nodes = [n for n in self._state.nodes.values() if scope.includes(n)]
        return {key: {n.labels[key] for n in nodes} for key in scope.keys}

    def with_hostnames(self, hosts: set[str]) -> set[str]:
        nodes = self._state.nodes.values()
        return {n.name for n in nodes if n.labels.get("kubernetes.io/hostname", "") in hosts}


def random_soft_pod(rng: random.Random, i: int) -> PodInfo:
    """Only ScheduleAnyway spreading, the pod's own or the system defaults (ReplicaSet)."""
    app = rng.choice("xy")
    raw = manifests.pod(f"s{i}", cpu=rng.choice(["100m", "500m"]), labels={"app": app})
    raw["metadata"]["uid"] = f"uid-s{i}"
    if rng.random() < 0.5:
        owned_by_replicaset(raw)
    else:
        keys = rng.sample(["zone", "kubernetes.io/hostname", "disk"], rng.choice([1, 1, 2]))
        raw["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": rng.choice([1, 2, 4]),
                "topologyKey": key,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": rng.choice([{"matchLabels": {"app": app}}, {"matchLabels": {}}]),
            }
            for key in keys
        ]
    if rng.random() < 0.2:
        raw["spec"]["tolerations"] = [{"operator": "Exists"}]
    return parse_pod(raw)


def random_samples(rng: random.Random, state: ClusterState, now: float) -> dict[str, NodeSample]:
    return {
        name: NodeSample(
            rng.choice([0.1, 0.4, 0.75, 0.85]), rng.random(), now - rng.choice([1, 30, 200])
        )
        for name in state.nodes
        if rng.random() < 0.9
    }


def same(
    fast: Decision | Unschedulable,
    slow: Decision | Unschedulable,
    policy: Policy,
    local: bool,
) -> None:
    assert type(fast) is type(slow)
    if isinstance(slow, Unschedulable):
        assert isinstance(fast, Unschedulable)
        assert fast.message == slow.message
        return
    assert isinstance(fast, Decision)
    assert (fast.all_hot, fast.hot_skipped) == (slow.all_hot, slow.hot_skipped)
    if slow.all_hot:
        assert weighted_load(policy, fast.chosen) == pytest.approx(
            weighted_load(policy, slow.chosen)
        )
    else:
        if local:  # no preferences: the load score alone ranks (with them, equal totals may
            assert fast.chosen.score == pytest.approx(slow.chosen.score)  # mix differently)
        assert fast.score == pytest.approx(slow.score)
        fast_runner, slow_runner = fast.runner_up, slow.runner_up
        assert (fast_runner is None) == (slow_runner is None)
        if fast_runner is not None and slow_runner is not None:
            if local:  # with preferences, runners-up of equal totals may differ in load
                assert fast_runner[1].score == pytest.approx(slow_runner[1].score)
            assert fast_runner[0] == pytest.approx(slow_runner[0])
    assert fast.chosen.node in {details.node for _, details in slow.ranked} or slow.all_hot


def compare(
    seed: int, profile: Profile = DEFAULT_PROFILE, heavy: bool = False, soft: bool = False
) -> int:
    """Schedule 120 random pods (spread- and affinity-heavy ones with `heavy`, only spread
    preferences with `soft`, on nodes some without a zone) with the index
    (built on `profile`) and with the full cycle (always the default profile) on a random
    cluster changing between pods; assert they agree. Returns how many pods took the
    constrained path."""
    rng = random.Random(seed)
    state = ClusterState()
    replicaset = {
        "metadata": {"namespace": "default", "name": "rs"},
        "spec": {"selector": {"matchLabels": {"app": "y"}}},
    }
    state.workloads.on_controller_event("replicasets", "ADDED", replicaset)
    for n in range(rng.randint(1, 25)):
        node = random_node(rng, f"n{n}")
        if soft and rng.random() < 0.2:
            del node["metadata"]["labels"]["zone"]
        state.upsert_node(node)
    now = 1_000_000.0
    samples = random_samples(rng, state, now)
    index = ScoreIndex(profile)
    placed: list[str] = []
    constrained = 0
    for i in range(120):
        action = rng.random()
        if action < 0.05:
            state.upsert_node(random_node(rng, f"n{rng.randint(0, 30)}"))
        elif action < 0.07 and state.nodes:
            state.delete_node(rng.choice(list(state.nodes)))
        elif action < 0.12 and placed:
            state.remove_pod(placed.pop(rng.randrange(len(placed))))
        elif action < 0.14 and placed:  # relabelled
            uid = rng.choice(placed)
            moved = replace(state.pods[uid], labels={"app": rng.choice("xyz")})
            state.observe_bound(moved, terminal=False)
        elif action < 0.15:
            samples = random_samples(rng, state, now)
        elif action < 0.2:
            now += rng.choice([1, 20, 100])
        policy = rng.choice(POLICIES)
        if soft:
            pod = random_soft_pod(rng, i)
        else:
            pod = random_heavy_pod(rng, i) if heavy else random_pod(rng, i)
        fast = index.schedule(pod, state, Basis(policy, samples, now, rng))
        slow = schedule_one(pod, Recounted(state), Basis(policy, samples, now, rng))
        local = node_local(pod, state)
        constrained += not local
        same(fast, slow, policy, local)
        if isinstance(fast, Decision):
            state.assume(pod, fast.node, at=now)
            placed.append(pod.uid)
    return constrained


@pytest.mark.parametrize("seed", range(40))
def test_index_agrees_with_the_full_cycle(seed: int) -> None:
    assert 0 < compare(seed) < 120  # both paths were taken


@pytest.mark.parametrize("seed", range(30))
def test_index_agrees_with_the_full_cycle_on_spread_and_affinity(seed: int) -> None:
    assert compare(seed, heavy=True) > 0


@pytest.mark.parametrize("seed", range(30))
def test_index_agrees_with_the_full_cycle_on_spread_preferences(seed: int) -> None:
    assert compare(seed, soft=True) > 0


class PortsUnsigned(NodePorts):
    """NodePorts that reads host_ports but forgets to declare them in its signature."""

    inputs = Inputs(placed=("host_ports",))


def test_the_comparison_fails_when_a_signature_omits_a_field() -> None:
    """The check above can fail: with host_ports missing from NodePorts' declared inputs, pods
    with and without host ports share heaps, and the index reuses verdicts it must not."""
    plugins = [PortsUnsigned() if isinstance(p, NodePorts) else p for p in DEFAULT_PLUGINS]
    failed = 0
    for seed in range(40):
        try:
            compare(seed, Profile(plugins))
        except AssertionError:
            failed += 1
    assert failed >= 5, failed


def test_a_pod_costs_a_few_evaluations_not_one_per_node() -> None:
    state = ClusterState()
    for n in range(500):
        state.upsert_node(manifests.node(f"n{n}"))
    index = ScoreIndex()
    policy, rng, samples = POLICIES[0], random.Random(0), {"n0": NodeSample(0.1, 0.1, 0.0)}
    for i in range(200):
        pod = pod_info(f"p{i}")
        decision = index.schedule(pod, state, Basis(policy, samples, 1.0, rng))
        assert isinstance(decision, Decision)
        state.assume(pod, decision.node)
    # One build of 500 nodes, then the node each pod went to.
    assert index.evaluations == 500 + 199


def test_invalid_pods_get_the_full_cycles_answer() -> None:
    state = ClusterState()
    state.upsert_node(manifests.node("n"))
    raw = manifests.pod("bad", cpu="lots")
    raw["metadata"]["uid"] = "bad-1"
    pod = parse_pod(raw)
    fast = ScoreIndex().schedule(pod, state, Basis(POLICIES[0], {}, 0.0, random.Random(0)))
    slow = schedule_one(pod, state, Basis(POLICIES[0], {}, 0.0, random.Random(0)))
    assert isinstance(fast, Unschedulable) and fast.message == slow.message
    assert "pod cannot be scheduled" in fast.message


def test_constrained_pods_reuse_node_local_verdicts_and_scores() -> None:
    """A spread pod visits every node, but re-evaluates only the node that changed."""
    state = ClusterState()
    for n in range(300):
        state.upsert_node(manifests.node(f"n{n}", labels={"zone": f"z{n % 3}"}))
    index = ScoreIndex()
    policy, rng, samples = POLICIES[0], random.Random(0), {"n0": NodeSample(0.1, 0.1, 0.0)}
    zones = []
    for i in range(60):
        raw = manifests.pod(f"s{i}", labels={"app": "s"})
        raw["metadata"]["uid"] = f"s-{i}"
        raw["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "s"}},
            }
        ]
        pod = parse_pod(raw)
        decision = index.schedule(pod, state, Basis(policy, samples, 1.0, rng))
        assert isinstance(decision, Decision)
        state.assume(pod, decision.node)
        zones.append(state.nodes[decision.node].labels["zone"])
    assert index.evaluations == 300 + 59
    assert sorted(zones.count(z) for z in ("z0", "z1", "z2")) == [20, 20, 20]
