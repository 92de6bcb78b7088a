"""Preemption for a pod group (KEP-5710) as a dry run: only if the whole minimum then fits,
victims spared most important first, a `disruptionMode: all` group evicted as one."""

from __future__ import annotations

import dataclasses
import random

from loadwise.framework.context import Basis
from loadwise.framework.plugin import NoPreemption
from loadwise.framework.plugins.gang_scheduling.preemption import (
    NO_ROOM,
    PodGroupPreemption,
    preempt_pod_group,
)
from loadwise.framework.pod_groups import UPSTREAM, PodGroupKey
from loadwise.framework.types import PodInfo
from loadwise.policies.policy import Policy, parse_spec
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

NOW = 1_000_000.0
BASIS = Basis(Policy("p", parse_spec({})), {}, NOW, random.Random(0))
LOW = PodGroupKey(UPSTREAM, "default", "low")


def placed(name: str, node: str, cpu: str, priority: int = 0, group: PodGroupKey | None = None,
           started: str = "2026-01-01T00:00:00Z") -> PodInfo:  # fmt: skip
    pod = pod_info(name, cpu=cpu, node=node)
    return dataclasses.replace(pod, priority=priority, group=group, start_time=started)


def members(count: int, cpu: str, priority: int = 100) -> list[PodInfo]:
    return [dataclasses.replace(pod_info(f"m{i}", cpu=cpu), priority=priority)
            for i in range(count)]  # fmt: skip


def test_the_fewest_least_important_victims_that_let_the_whole_minimum_fit() -> None:
    state = state_with(manifests.node("a", cpu="4"), manifests.node("b", cpu="4"))
    old = placed("old", "a", "2", started="2025-01-01T00:00:00Z")  # more important: started first
    young = placed("young", "a", "2", started="2026-06-01T00:00:00Z")
    busy = placed("busy", "b", "4")
    for pod in (old, young, busy):
        state.put_back(pod)
    outcome = preempt_pod_group(members(3, "2"), state, BASIS, 3, 0)  # 6 cpu: 2 free, 8 in all
    assert isinstance(outcome, PodGroupPreemption)
    # Evicting young (2) frees a: 4; busy must go too (b: 4): old is spared.
    assert [v.name for v in outcome.victims] == ["busy", "young"]
    assert sorted(outcome.nodes.values()) == ["a", "b", "b"]
    assert set(state.pods) == {old.uid, young.uid, busy.uid}  # restored


def test_no_preemption_when_the_minimum_does_not_fit_even_then() -> None:
    state = state_with(manifests.node("a", cpu="4"))
    state.put_back(placed("low", "a", "2"))
    state.put_back(placed("high", "a", "2", priority=500))
    outcome = preempt_pod_group(members(2, "2"), state, BASIS, 2, 0)
    assert isinstance(outcome, NoPreemption) and outcome.message == NO_ROOM
    assert preempt_pod_group(members(1, "1", priority=0), state, BASIS, 1, 0) is None  # none lower


def test_a_group_whose_disruption_mode_is_all_is_evicted_whole() -> None:
    state = state_with(manifests.node("a", cpu="2"), manifests.node("b", cpu="2"))
    state.put_back(placed("low-0", "a", "2", group=LOW))
    state.put_back(placed("low-1", "b", "1", group=LOW))
    alone = preempt_pod_group(members(1, "2"), state, BASIS, 1, 0)
    assert isinstance(alone, PodGroupPreemption) and [v.name for v in alone.victims] == ["low-1"]
    whole = preempt_pod_group(members(1, "2"), state, BASIS, 1, 0, together=lambda key: key == LOW)
    assert isinstance(whole, PodGroupPreemption)
    assert sorted(v.name for v in whole.victims) == ["low-0", "low-1"]
