"""Rebalancing's plan on synthetic clusters: which pods leave a hot node and where their
replacements would go, decided by the scheduling cycle with the hot node taken out."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loadwise.framework.context import Basis
from loadwise.framework.heat import sample_over
from loadwise.framework.rebalance import (
    Candidate,
    HotStreaks,
    Limits,
    ineligible,
    plan_relief,
)
from loadwise.framework.types import parse_pod
from loadwise.policies.policy import Policy, parse_spec
from loadwise.scheduler.state import ClusterState
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import owned_by_replicaset, state_with

NOW = 1_000_000.0
POLICY = Policy("p", parse_spec({"hotThresholds": {"cpu": 80, "memory": 90}}))


def running(name: str, node: str, cpu: str = "500m", priority: int = 0) -> dict[str, Any]:
    raw = owned_by_replicaset(manifests.pod(name, cpu=cpu))
    raw["metadata"]["uid"] = f"uid-{name}"
    raw["spec"]["nodeName"] = node
    raw["spec"]["priority"] = priority
    raw["status"] = {"phase": "Running", "qosClass": "Burstable"}
    return raw


def cluster(*pods: dict[str, Any]) -> ClusterState:
    state = state_with(*(manifests.node(n, cpu="4") for n in ("hot", "warm", "cool")))
    for raw in pods:
        state.observe_bound(parse_pod(raw, placed=True), terminal=False)
    return state


def requested(state: ClusterState) -> dict[str, dict[str, int]]:
    return {n: {k: v for k, v in state.requested(n).items() if v} for n in ("hot", "warm", "cool")}


def samples(**usage: float) -> dict[str, NodeSample]:
    return {name: NodeSample(cpu, 0.3, NOW - 1) for name, cpu in usage.items()}


def candidate(raw: dict[str, Any], cpu: float, qos: str = "Burstable") -> Candidate:
    pod = parse_pod(raw)  # in full, as its replacement: constraints included
    return Candidate(pod, qos, cpu, 0.05)


def test_a_hot_node_sheds_the_fewest_pods_to_a_cool_node_and_the_view_is_restored() -> None:
    pods = [
        running("small", "hot"),
        running("big", "hot"),
        running("vip", "hot", priority=9),
    ]
    state = cluster(*pods)
    before = requested(state)
    usage = samples(hot=0.95, warm=0.78, cool=0.2)
    candidates = [
        candidate(pods[0], 0.05),
        candidate(pods[1], 0.30),  # uses more than it requests; alone enough (95% - 30% < 80%)
        candidate(pods[2], 0.40),  # the most useful, but of a higher priority
    ]
    relief = plan_relief(
        "hot", usage["hot"], candidates, state, Basis(POLICY, usage, NOW, random.Random(1))
    )
    assert relief.refused == "" and relief.over == {"cpu": 0.95 - 0.8}
    # Lowest priority first, then the larger share: big alone brings the node under 80%.
    assert [(m.pod.name, m.target) for m in relief.moves] == [("big", "cool")]
    assert all(m.source == "hot" for m in relief.moves)
    assert requested(state) == before  # the dry run left the view as it was
    assert {p.name for p in state.pods_on("hot")} == {"small", "big", "vip"}


def test_nothing_moves_when_no_cool_node_would_take_it_or_it_would_not_be_enough() -> None:
    pods = [running("a", "hot"), running("b", "hot")]
    state = cluster(*pods)
    usage = samples(hot=0.95, warm=0.85, cool=0.82)  # every other node hot too
    basis = Basis(POLICY, usage, NOW, random.Random(1))
    relief = plan_relief("hot", usage["hot"], [candidate(p, 0.3) for p in pods], state, basis)
    assert relief.moves == () and "every node it fits on would be hot" in relief.refused
    usage = samples(hot=0.99, warm=0.3, cool=0.2)
    too_little = [candidate(p, 0.05) for p in pods]  # 10% of 19% over
    relief = plan_relief(
        "hot", usage["hot"], too_little, state, Basis(POLICY, usage, NOW, random.Random(1))
    )
    assert relief.moves == () and "use too little" in relief.refused


def test_a_target_must_be_measured_and_the_node_over_a_threshold() -> None:
    pod = running("a", "hot")
    state = cluster(pod)
    usage = {"hot": NodeSample(0.95, 0.3, NOW - 1)}  # warm and cool have no sample
    relief = plan_relief(
        "hot",
        usage["hot"],
        [candidate(pod, 0.3)],
        state,
        Basis(POLICY, usage, NOW, random.Random(1)),
    )
    assert relief.moves == () and "no fresh sample" in relief.refused
    calm = NodeSample(0.5, 0.5, NOW)
    assert sample_over(POLICY, calm) == {}
    assert plan_relief(
        "hot", calm, [], state, Basis(POLICY, usage, NOW, random.Random(1))
    ).refused == ("not over its hot thresholds")


def test_which_pods_may_move() -> None:
    ok = running("ok", "hot")
    assert ineligible(ok, "loadwise-scheduler", False) is None
    cases: dict[str, dict[str, dict[str, Any]]] = {
        "a static pod": {"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}},
        "a DaemonSet's pod": {"metadata": {"ownerReferences": [
            {"kind": "DaemonSet", "name": "d", "uid": "d", "controller": True}]}},
        "placed by another scheduler": {"spec": {"schedulerName": "default-scheduler"}},
        "a member of a pod group (moved alone, it would break its gang)": {
            "spec": {"schedulingGroup": {"podGroupName": "g"}}},
        "no ReplicaSet, StatefulSet or ReplicationController recreates it": {
            "metadata": {"ownerReferences": []}},
        "terminating": {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},
        "not running": {"status": {"phase": "Pending"}},
        "local storage (emptyDir or hostPath)": {
            "spec": {"volumes": [{"name": "v", "emptyDir": {}}]}},
    }  # fmt: skip
    for reason, change in cases.items():
        raw = running("x", "hot")
        for part, fields in change.items():
            raw[part] = {**raw.get(part, {}), **fields}
        assert ineligible(raw, "loadwise-scheduler", False) == reason, reason
    with_volume = running("v", "hot")
    with_volume["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    assert ineligible(with_volume, "loadwise-scheduler", True) is None


def test_hysteresis() -> None:
    streaks = HotStreaks()
    nodes = ["a", "b"]
    assert streaks.update({"a"}, nodes, 3, 2) == set()
    assert streaks.update({"a"}, nodes, 3, 2) == set()
    assert streaks.update({"a"}, nodes, 3, 2) == {"a"}  # three in a row
    assert streaks.update(set(), nodes, 3, 2) == {"a"}  # one cool refresh is not enough
    assert streaks.update({"a"}, nodes, 3, 2) == {"a"}
    assert streaks.update(set(), nodes, 3, 2) == {"a"}
    assert streaks.update(set(), nodes, 3, 2) == set()  # two in a row
    assert streaks.update({"b"}, nodes, 1, 1) == {"b"}
    assert streaks.update({"b"}, ["a"], 1, 1) == set()  # b was deleted


def test_a_replacement_too_big_for_every_cool_node_is_passed_over_for_the_next_pod() -> None:
    """The replacement's estimate (requests x placementEstimate here) counts on its target: a
    2-CPU pod would make the cool node hot (20% + 75%), so smaller pods go instead."""
    pods = [running("big", "hot", cpu="2"), running("a", "hot"), running("b", "hot")]
    state = cluster(*pods)
    usage = samples(hot=0.95, warm=0.78, cool=0.2)
    wanted = [candidate(pods[0], 0.30), candidate(pods[1], 0.10), candidate(pods[2], 0.10)]
    relief = plan_relief(
        "hot", usage["hot"], wanted, state, Basis(POLICY, usage, NOW, random.Random(1))
    )
    assert [m.pod.name for m in relief.moves] == ["a", "b"]
    # the second replacement is placed with the first counted on its target
    assert [m.target for m in relief.moves] == ["cool", "cool"]


def test_a_target_must_keep_headroom_under_its_thresholds() -> None:
    """A 500m pod (750m estimated: requests x placementEstimate 1.5) on a 4-core node at 60%
    makes 79%: not hot, but within 5 points of 80%; the node at 20% is taken instead, and with
    no such node nothing moves."""
    pod = running("a", "hot")
    state = cluster(pod)
    usage = samples(hot=0.95, warm=0.60, cool=0.20)
    relief = plan_relief(
        "hot",
        usage["hot"],
        [candidate(pod, 0.30)],
        state,
        Basis(POLICY, usage, NOW, random.Random(1)),
    )
    assert [m.target for m in relief.moves] == ["cool"]
    usage = samples(hot=0.95, warm=0.60, cool=0.62)
    relief = plan_relief(
        "hot",
        usage["hot"],
        [candidate(pod, 0.30)],
        state,
        Basis(POLICY, usage, NOW, random.Random(1)),
    )
    assert not relief.moves and "within 5% of its hot thresholds with it" in relief.refused


def test_a_target_keeps_headroom_on_the_policys_extra_dimensions_too() -> None:
    """The same rule for every dimension: cool at 10% CPU but at 77% of its GPU (threshold 80),
    a node is within 5 points of a hot threshold and takes no replacement; the warm one at 40%
    GPU does. A node over on CPU and GPU is relieved of what pods are measured to use (CPU)."""
    policy = Policy(
        "p",
        parse_spec(
            {
                "hotThresholds": {"cpu": 80, "memory": 90},
                "dimensions": [{"name": "gpu", "weight": 1, "hotThreshold": 80}],
            }
        ),
    )
    pod = running("a", "hot")
    state = cluster(pod)
    usage = {
        "hot": NodeSample(0.95, 0.3, NOW - 1, extra={"gpu": 0.9}),
        "warm": NodeSample(0.40, 0.3, NOW - 1, extra={"gpu": 0.40}),
        "cool": NodeSample(0.10, 0.3, NOW - 1, extra={"gpu": 0.77}),
    }
    relief = plan_relief(
        "hot",
        usage["hot"],
        [candidate(pod, 0.30)],
        state,
        Basis(policy, usage, NOW, random.Random(1)),
    )
    assert relief.over == pytest.approx({"cpu": 0.15, "gpu": 0.10})
    assert [m.target for m in relief.moves] == ["warm"]
    usage["warm"] = NodeSample(0.40, 0.3, NOW - 1, extra={"gpu": 0.78})
    relief = plan_relief(
        "hot",
        usage["hot"],
        [candidate(pod, 0.30)],
        state,
        Basis(policy, usage, NOW, random.Random(1)),
    )
    assert not relief.moves
    assert "within 5% of its hot thresholds with it" in relief.refused
    assert "gpu 7" in relief.refused


def test_a_replacement_is_estimated_at_least_by_what_its_pod_uses_now() -> None:
    """Its workload's learned figure lags a drift: the pod measured at 1.6 cores would push the
    node at 45% to 85%, though requests x placementEstimate (750m) say 64%."""
    pod = running("a", "hot")
    state = cluster(pod)
    usage = samples(hot=0.95, warm=0.90, cool=0.45)
    small = Candidate(parse_pod(pod), "Burstable", 0.4, 0.05, used=(1600, 0))
    relief = plan_relief(
        "hot", usage["hot"], [small], state, Basis(POLICY, usage, NOW, random.Random(1))
    )
    assert not relief.moves and "every node it fits on would be hot" in relief.refused
    guessed = Candidate(parse_pod(pod), "Burstable", 0.4, 0.05, used=(100, 0))
    relief = plan_relief(
        "hot", usage["hot"], [guessed], state, Basis(POLICY, usage, NOW, random.Random(1))
    )
    assert [m.target for m in relief.moves] == ["cool"]


def test_a_higher_priority_pod_moves_only_when_the_others_cannot_relieve_the_node() -> None:
    """Three small pods of priority 0 (6% each) cannot bring 95% under 80%: the one big pod of
    priority 9 (30%) moves, alone, rather than the small ones and then it. When two small ones
    together would do, they move and the big one stays."""
    pods = [running(f"s{i}", "hot") for i in range(3)] + [running("vip", "hot", priority=9)]
    state = cluster(*pods)
    usage = samples(hot=0.95, warm=0.78, cool=0.2)
    small = [candidate(p, 0.04) for p in pods[:3]]
    basis = Basis(POLICY, usage, NOW, random.Random(1))
    relief = plan_relief("hot", usage["hot"], [*small, candidate(pods[3], 0.30)], state, basis)
    assert [m.pod.name for m in relief.moves] == ["vip"]
    enough = [candidate(p, 0.08) for p in pods[:3]]
    basis = Basis(POLICY, usage, NOW, random.Random(1))
    relief = plan_relief("hot", usage["hot"], [*enough, candidate(pods[3], 0.30)], state, basis)
    assert sorted(m.pod.name for m in relief.moves) == ["s0", "s1"]
    limits = Limits(max_moves=0, held_back="limits.perNodePerHour leaves 0")
    basis = Basis(POLICY, usage, NOW, random.Random(1))
    relief = plan_relief(
        "hot", usage["hot"], [*small, candidate(pods[3], 0.30)], state, basis, limits=limits
    )
    assert relief.refused == "limits.perNodePerHour leaves 0"
