"""A group's decision: all of its minimum placed against one view, load-aware, or none."""

from __future__ import annotations

import random

from loadwise.framework.context import Basis
from loadwise.framework.plugins.gang_scheduling.placement import what_if_pod_group
from loadwise.policies.policy import Policy, parse_spec
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

NOW = 1_000_000.0
POLICY = Policy("p", parse_spec({"weights": {"cpu": 1, "memory": 0}}))


def basis(**usage: float) -> Basis:
    samples = {node: NodeSample(cpu, 0.2, NOW - 1) for node, cpu in usage.items()}
    return Basis(POLICY, samples, NOW, random.Random(0))


def members(count: int, cpu: str = "1") -> list:
    return [pod_info(f"m{i}", cpu=cpu) for i in range(count)]


def test_the_minimum_is_placed_on_cool_nodes_each_member_counted_before_the_next() -> None:
    state = state_with(*(manifests.node(n, cpu="4") for n in ("hot", "cool-a", "cool-b")))
    decision = what_if_pod_group(
        members(4), state, basis(**{"hot": 0.95, "cool-a": 0.1, "cool-b": 0.1}), 4
    )
    assert decision.reached and decision.message == ""
    nodes = [d.node for _, d in decision.placed]
    assert "hot" not in nodes and sorted(set(nodes)) == ["cool-a", "cool-b"]
    assert not state.pods  # the view is restored: nothing is held


def test_below_the_minimum_nothing_is_placed_and_the_words_are_kube_schedulers() -> None:
    state = state_with(manifests.node("a", cpu="2"), manifests.node("b", cpu="2"))
    decision = what_if_pod_group(members(5), state, basis(a=0.1, b=0.1), 5)
    assert not decision.reached
    assert decision.message == (
        "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining"
    )
    assert len(decision.refused) == 1 and not state.pods


def test_the_try_stops_once_the_rest_cannot_reach_the_minimum() -> None:
    state = state_with(manifests.node("a", cpu="1"))
    decision = what_if_pod_group(members(3), state, basis(a=0.1), 3)
    assert len(decision.placed) == 1 and len(decision.refused) == 1
    assert len(decision.untried) == 1
    assert decision.message.endswith("minCount (3) cannot be satisfied: 1 scheduled, 1 remaining")


def test_members_already_scheduled_count_and_extras_need_only_fit() -> None:
    state = state_with(manifests.node("a", cpu="2"))
    decision = what_if_pod_group(members(3), state, basis(a=0.1), 4, scheduled=2)
    assert decision.reached and len(decision.placed) == 2  # 2 + 2 >= 4; the third fits nowhere
    nothing = what_if_pod_group(members(1, cpu="8"), state, basis(a=0.1), 2, scheduled=2)
    assert not nothing.reached and nothing.message == "pod group is unschedulable"
