"""Rebalancing's moves as the scheduler obeys them: the workload whose pod was moved is kept
off the node it left (the RebalanceCoolDown filter, on the full cycle and the score index's
path alike) until the cool-down ends; the room on the target is held against pods of no higher
priority until the replacement claims it or the reservation ends; old records are dropped."""

from __future__ import annotations

import random
from typing import Any

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, Nominated, Unschedulable, schedule_one
from loadwise.framework.index import ScoreIndex
from loadwise.framework.types import Owner, parse_pod
from loadwise.policies.policy import Policy, parse_spec
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.preemptor import Preemptor
from loadwise.scheduler.rebalancing.moves import EVICTED, KEEP_SECONDS, MoveRecord, Moves
from loadwise_dev import manifests

from ...fakes import FakeTransport
from ...helpers import owned_by_replicaset, state_with

NOW = 1_000_000.0
POLICY = Policy("p", parse_spec({}))


def pod(name: str, owner: str = "rs", cpu: str = "500m", on: str = "") -> Any:
    raw = owned_by_replicaset(manifests.pod(name, cpu=cpu), name=owner)
    raw["metadata"]["uid"] = f"uid-{name}"
    if on:
        raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": on}
    return parse_pod(raw)


def record(source: str = "a", target: str = "b", cpu: int = 3000) -> MoveRecord:
    return MoveRecord(
        uid="uid-old", namespace="default", name="old", policy="p",
        owner=Owner("apps/v1", "ReplicaSet", "rs", "rs"), source=source, target=target,
        at=NOW, gone_by=NOW + 30,
        reserve_until=NOW + 120, cool_until=NOW + 600, priority=0,
        requests={"cpu": cpu}, nonzero=(cpu, 0), state=EVICTED,
    )  # fmt: skip


def setup() -> tuple[Any, Moves, Preemptor]:
    state = state_with(*(manifests.node(n, cpu="4") for n in ("a", "b", "c")))
    preemptor = Preemptor(
        state, Binder(FakeTransport(), "s"), ScoreIndex().profile, random.Random(0)
    )
    return state, Moves(state, preemptor.nominated), preemptor


def test_the_workload_stays_off_the_node_it_left_until_the_cool_down_ends() -> None:
    state, moves, _ = setup()
    moves.add(record(cpu=100))
    for at in (NOW, NOW + 599):
        for rng_seed in range(5):  # whatever the tie-break, never the source
            result = schedule_one(pod("new"), state, Basis(POLICY, {}, at, random.Random(rng_seed)))
            assert isinstance(result, Decision) and result.node != "a"
            index = ScoreIndex().schedule(
                pod("new"), state, Basis(POLICY, {}, at, random.Random(rng_seed))
            )
            assert isinstance(index, Decision) and index.node != "a"
    # another workload is not kept off it
    other = pod("x", owner="other")
    assert {schedule_one(other, state, Basis(POLICY, {}, NOW, random.Random(s))).node  # type: ignore[union-attr]
            for s in range(20)} >= {"a"}  # fmt: skip
    # only the source fits: the refusal says why
    only_a = pod("new", on="a")
    refused = schedule_one(only_a, state, Basis(POLICY, {}, NOW, random.Random(0)))
    assert isinstance(refused, Unschedulable)
    assert "1 node(s) had a pod of this workload moved off them by rebalancing (cool-down)" in (
        refused.message
    )
    assert isinstance(
        schedule_one(only_a, state, Basis(POLICY, {}, NOW + 601, random.Random(0))), Decision
    )


def test_the_room_on_the_target_is_held_until_claimed_and_then_used_by_the_replacement() -> None:
    state, moves, preemptor = setup()
    moves.add(record(source="a", target="b", cpu=3000))
    # b has 3 of its 4 cores held: a 2-core pod of no higher priority goes elsewhere
    other = pod("other", owner="else", cpu="2")
    for seed in range(5):
        held = preemptor.held_for(other)
        basis = Basis(POLICY, {}, NOW, random.Random(seed))
        result = schedule_one(other, state, basis, nominated=Nominated(state, held))
        assert isinstance(result, Decision) and result.node != "b"
    # the replacement claims the room: it is tried on the target first and takes it
    replacement = pod("new", cpu="3")
    target = moves.claim(replacement, NOW)
    assert target == "b" and not preemptor.nominated
    replacement.nominated_node = target
    result = schedule_one(replacement, state, Basis(POLICY, {}, NOW, random.Random(0)))
    assert isinstance(result, Decision) and result.node == "b"
    assert moves.claim(pod("second"), NOW) is None  # one claim per move


def test_an_unclaimed_reservation_ends_and_records_leave_after_the_hour() -> None:
    state, moves, preemptor = setup()
    moves.add(record())
    assert preemptor.nominated
    moves.prune(NOW + 121)
    assert not preemptor.nominated  # room no longer held
    assert moves.claim(pod("late"), NOW + 121) is None
    assert state.moved_off == {"rs": {"a": NOW + 600}}  # the cool-down still holds
    moves.prune(NOW + 601)
    assert state.moved_off == {} and len(moves.records) == 1  # still counted for the limits
    assert moves.prune(NOW + KEEP_SECONDS + 1) and moves.records == []
