"""DefaultPreemption on hand-made clusters, each outcome worked out by hand from
kube-scheduler's rules (framework/preemption.py cites them)."""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

import pytest

from loadwise.config import SchedulingSettings
from loadwise.framework.context import CycleContext
from loadwise.framework.cycle import refusal, refusal_with_nominated
from loadwise.framework.disruption_budgets import DisruptionBudget, parse_budget, split_violating
from loadwise.framework.plugin import NoPreemption, Preemption
from loadwise.framework.plugins.inter_pod_affinity import required_affinity
from loadwise.framework.plugins.topology_spread import hard_spread
from loadwise.framework.preemption import (
    NEVER,
    NO_VICTIMS,
    NOT_HELPFUL,
    TERMINATING,
    best_candidates,
    candidate_count,
    preempt,
)
from loadwise.framework.profile import DEFAULT_PROFILE
from loadwise.framework.types import PodInfo, parse_pod
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.scheduler.state import ClusterState
from loadwise_dev import manifests

from ...fakes import FakeTransport
from ...helpers import state_with
from ..framework.test_index import Recounted, random_heavy_pod, random_node, random_pod

FILTERS = DEFAULT_PROFILE.filters
_uid = iter(range(10**9))


def raw_pod(
    name: str, cpu: str, priority: int, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    raw = manifests.pod(name, cpu=cpu, labels=labels)
    raw["metadata"]["uid"] = f"{name}-{next(_uid)}"
    raw["spec"]["priority"] = priority
    raw["spec"].update(spec)
    return raw


def place(
    state: ClusterState, node: str, name: str, cpu: str, priority: int, started: int = 0, **kw: Any
) -> PodInfo:
    raw = raw_pod(name, cpu, priority, **kw)
    raw["spec"]["nodeName"] = node
    if started:
        raw["status"] = {"startTime": f"2026-11-24T10:{started:02d}:00Z"}
    pod = parse_pod(raw, placed=True)
    state.observe_bound(pod, terminal=False)
    return pod


def run(
    state: ClusterState,
    pod: dict[str, Any],
    budgets: list[DisruptionBudget] | None = None,
    held: dict[str, list[PodInfo]] | None = None,
) -> Preemption | NoPreemption:
    return preempt(parse_pod(pod), state, FILTERS, budgets or [], held or {}, random.Random(0))


def names(result: Preemption | NoPreemption) -> tuple[str, list[str]]:
    assert isinstance(result, Preemption), result
    return result.node, sorted(v.name for v in result.victims)


def snapshot(state: ClusterState) -> Any:
    return (
        sorted(state.pods),
        {n: dict(state.requested(n)) for n in state.nodes},
        sorted(state.anti_affinity_pods),
    )


def test_the_lower_priority_pod_is_evicted_and_the_state_is_as_before() -> None:
    state = state_with(manifests.node("n1", cpu="1"))
    place(state, "n1", "low", "600m", 0)
    before = snapshot(state)
    assert names(run(state, raw_pod("vip", "800m", 100))) == ("n1", ["low"])
    assert snapshot(state) == before


def test_victims_are_reprieved_most_important_first() -> None:
    # 1 cpu, three pods of 300m; the pod needs 500m: 30 comes back (800m), 20 and 10 cannot.
    state = state_with(manifests.node("n1", cpu="1"))
    for priority in (10, 20, 30):
        place(state, "n1", f"p{priority}", "300m", priority, started=priority)
    assert names(run(state, raw_pod("vip", "500m", 100))) == ("n1", ["p10", "p20"])


def test_equal_or_higher_priority_pods_are_never_victims() -> None:
    state = state_with(manifests.node("n1", cpu="1"))
    place(state, "n1", "peer", "600m", 100)
    result = run(state, raw_pod("vip", "800m", 100))
    assert result == NoPreemption(f"0/1 nodes are available: 1 {NO_VICTIMS}.")


def test_the_node_with_the_least_important_victims_is_chosen() -> None:
    state = state_with(manifests.node("n1", cpu="1"), manifests.node("n2", cpu="1"))
    place(state, "n1", "fifty", "600m", 50)
    place(state, "n2", "ten", "600m", 10)
    assert names(run(state, raw_pod("vip", "800m", 100))) == ("n2", ["ten"])


def test_fewer_budget_violations_beat_lower_priority() -> None:
    state = state_with(manifests.node("n1", cpu="1"), manifests.node("n2", cpu="1"))
    place(state, "n1", "guarded", "600m", 10, labels={"app": "db"})
    place(state, "n2", "free", "600m", 50, labels={"app": "web"})
    budget = parse_budget(
        {
            "metadata": {"namespace": "default", "name": "db"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    result = run(state, raw_pod("vip", "800m", 100), [budget])
    assert names(result) == ("n2", ["free"])
    assert isinstance(result, Preemption) and result.pdb_violations == 0
    # With the budget allowing one disruption, the lower priority wins again.
    allowing = DisruptionBudget("default", "db", budget.selector, 1, frozenset())
    assert names(run(state, raw_pod("vip", "800m", 100), [allowing])) == ("n1", ["guarded"])


def test_budget_protected_pods_are_reprieved_first() -> None:
    # Either pod alone makes room; the guarded one (more important otherwise: 20 > 10 would be
    # reprieved first anyway, so make it the less important) comes back first and stays.
    state = state_with(manifests.node("n1", cpu="1"))
    place(state, "n1", "guarded", "400m", 10, labels={"app": "db"})
    place(state, "n1", "other", "400m", 20, labels={"app": "web"})
    budget = DisruptionBudget(
        "default",
        "db",
        parse_budget({"spec": {"selector": {"matchLabels": {"app": "db"}}}}).selector,
        0,
        frozenset(),
    )
    result = run(state, raw_pod("vip", "500m", 100), [budget])
    assert names(result) == ("n1", ["other"])
    assert isinstance(result, Preemption) and result.pdb_violations == 0


def test_budgets_are_spent_in_importance_order() -> None:
    a = parse_pod(raw_pod("a", "1", 20, labels={"app": "db"}))
    b = parse_pod(raw_pod("b", "1", 10, labels={"app": "db"}))
    c = parse_pod(raw_pod("c", "1", 5, labels={"app": "web"}))
    budget = DisruptionBudget(
        "default",
        "db",
        parse_budget({"spec": {"selector": {"matchLabels": {"app": "db"}}}}).selector,
        1,
        frozenset(),
    )
    violating, keeping = split_violating([a, b, c], [budget])
    assert [p.name for p in violating] == ["b"] and [p.name for p in keeping] == ["a", "c"]
    # An empty selector protects nothing here, as in kube-scheduler.
    empty = parse_budget({"metadata": {"namespace": "default"}, "spec": {"selector": {}}})
    assert split_violating([a, b], [empty]) == ([], [a, b])


def test_never_and_unresolvable_nodes_do_not_preempt() -> None:
    state = state_with(manifests.node("n1", cpu="1"))
    place(state, "n1", "low", "600m", 0)
    never = raw_pod("vip", "800m", 100, preemptionPolicy="Never")
    assert run(state, never) == NoPreemption(NEVER)
    # Only a node the pod's nodeSelector excludes: removing pods cannot help.
    elsewhere = raw_pod("vip", "800m", 100, nodeSelector={"zone": "b"})
    assert run(state, elsewhere) == NoPreemption(f"0/1 nodes are available: 1 {NOT_HELPFUL}.")
    # More cpu than the node has at all: unresolvable too (kube-scheduler's NodeResourcesFit).
    assert run(state, raw_pod("vip", "2", 100)) == NoPreemption(
        f"0/1 nodes are available: 1 {NOT_HELPFUL}."
    )


def test_no_second_preemption_while_a_victim_terminates_on_the_nominated_node() -> None:
    state = state_with(manifests.node("n1", cpu="1"), manifests.node("n2", cpu="1"))
    victim = raw_pod("low", "600m", 0)
    victim["spec"]["nodeName"] = "n1"
    victim["metadata"]["deletionTimestamp"] = "2026-11-24T10:00:00Z"
    victim["status"] = {
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
    }
    state.observe_bound(parse_pod(victim, placed=True), terminal=False)
    place(state, "n2", "other", "600m", 0)
    vip = raw_pod("vip", "800m", 100)
    vip["status"] = {"nominatedNodeName": "n1"}
    assert run(state, vip) == NoPreemption(TERMINATING)
    # Not nominated: it may preempt (n2's pod; n1's is already going, and counts as a victim).
    assert isinstance(run(state, raw_pod("vip2", "800m", 100)), Preemption)


def test_anti_affinity_victims_make_room_and_counts_are_restored() -> None:
    state = state_with(manifests.node("n1", cpu="4"))
    place(state, "n1", "web", "100m", 0, labels={"app": "web"})
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    before = snapshot(state)
    assert names(run(state, raw_pod("vip", "100m", 100, affinity=anti))) == ("n1", ["web"])
    assert snapshot(state) == before


def test_room_held_for_a_nominated_pod_of_equal_or_higher_priority() -> None:
    state = state_with(manifests.node("n1", cpu="1"))
    place(state, "n1", "low", "300m", 0)
    # A pod of priority 100 is nominated to n1 and holds 600m there: a pod of 100 that needs
    # 300m (which fits beside "low" alone) must evict "low"; one that needs 500m cannot fit.
    holder = parse_pod(raw_pod("holder", "600m", 100))
    holder.node_name = "n1"
    held = {"n1": [holder]}
    assert names(run(state, raw_pod("vip", "300m", 100), held=held)) == ("n1", ["low"])
    big = run(state, raw_pod("big", "500m", 100), held=held)
    assert big == NoPreemption("0/1 nodes are available: 1 Insufficient cpu.")
    assert "holder" not in {p.name for p in state.pods.values()}


def test_ranking_follows_kube_scheduler() -> None:
    state = state_with(*(manifests.node(f"n{i}", cpu="1") for i in range(1, 4)))
    place(state, "n1", "old", "600m", 5, started=1)
    place(state, "n2", "young", "600m", 5, started=30)
    # n3: two victims of priority 5 and 0: the sum with kube-scheduler's offset is larger.
    place(state, "n3", "a", "300m", 5, started=40)
    place(state, "n3", "b", "300m", 0, started=41)
    result = run(state, raw_pod("vip", "800m", 100))
    assert names(result) == ("n2", ["young"])  # the latest start among the top victims
    assert candidate_count(50) == 50 and candidate_count(5000) == 500


def test_ties_go_to_the_coolest_node() -> None:
    state = state_with(manifests.node("n1", cpu="1"), manifests.node("n2", cpu="1"))
    place(state, "n1", "a", "600m", 5, started=3)
    place(state, "n2", "b", "600m", 5, started=3)
    pod = parse_pod(raw_pod("vip", "800m", 100))
    loads = {"n1": 0.7, "n2": 0.2}
    for seed in range(5):
        result = preempt(pod, state, FILTERS, [], {}, random.Random(seed), loads.__getitem__)
        assert isinstance(result, Preemption) and result.node == "n2"
    candidates = [
        c
        for c in (preempt(pod, state, FILTERS, [], {}, random.Random(s)) for s in range(20))
        if isinstance(c, Preemption)
    ]
    assert {c.node for c in candidates} == {"n1", "n2"}  # without loads: either
    assert len(best_candidates([])) == 0


def counts(state: ClusterState, pod: PodInfo) -> Any:
    """Everything incremental a dry run touches, copied (the counts are live objects)."""
    ctx = CycleContext(pod, state)
    affinity = required_affinity(ctx)  # the order of placed terms may change: compared sorted
    parts = (affinity.affinity, affinity.anti_affinity, affinity.existing_anti) if affinity else ()
    return copy.deepcopy(
        (
            snapshot(state),
            sorted(state.weighted_affinity_pods),
            sorted((repr(t), dict(c)) for t, c in state.anti_affinity_domains()),
            sorted((repr(t), w, dict(c)) for t, w, c in state.weighted_affinity_domains()),
            hard_spread(ctx),
            [sorted((key, sorted(c.items())) for key, c in part) for part in parts],
        )
    )


@pytest.mark.parametrize("seed", range(60))
def test_random_dry_runs_restore_the_state_and_their_victims_make_room(seed: int) -> None:
    rng = random.Random(seed)
    state = state_with(*(random_node(rng, f"n{i}") for i in range(6)))
    names = list(state.nodes)
    for i in range(rng.randrange(10, 40)):
        placed = rng.choice([random_pod, random_heavy_pod])(rng, i)
        placed.priority = rng.choice([0, 10, 10, 50, 100, 1000])
        placed.start_time = f"2026-11-24T10:{rng.randrange(60):02d}:00Z"
        placed.node_name = rng.choice(names)
        state.observe_bound(placed, terminal=False)
    pod = random_heavy_pod(rng, 999)
    pod.priority = rng.choice([50, 100, 500])
    pod.requests = parse_pod(raw_pod("x", rng.choice(["1", "2", "3"]), 0)).requests
    before = counts(state, pod)
    result = preempt(pod, state, FILTERS, [], {}, rng)
    assert counts(state, pod) == before
    if isinstance(result, Preemption):
        node = state.nodes[result.node]
        assert all(v.priority < pod.priority for v in result.victims)
        for victim in result.victims:
            state.set_aside(victim.uid)
        try:  # with them gone, the pod fits, by counts recounted from scratch
            assert refusal(CycleContext(pod, Recounted(state)), node, FILTERS) is None
        finally:
            for victim in result.victims:
                state.put_back(victim)
        assert counts(state, pod) == before


def test_status_only_updates_of_placed_pods_reach_what_preemption_reads() -> None:
    """The kubelet writes startTime after the binding, in an update that changes nothing
    else: the scheduler's cheap path for such events must still keep it (a victim order and
    kube-scheduler's last ranking rule depend on it), and the victim mark of a pod deleted."""
    scheduler = Scheduler(
        "loadwise-scheduler",
        Binder(FakeTransport(), "loadwise-scheduler"),
        {},
        SchedulingQueue(1, 10, 60),
    )
    scheduler.on_node_event(None, manifests.node("n1"))
    raw = raw_pod("web", "100m", 0)
    raw["spec"]["nodeName"] = "n1"
    scheduler.on_pod_event("ADDED", raw)
    uid = raw["metadata"]["uid"]
    assert scheduler.state.pods[uid].start_time == ""
    raw["status"] = {"startTime": "2026-11-24T10:00:00Z"}
    scheduler.on_pod_event("MODIFIED", raw)
    assert scheduler.state.pods[uid].start_time == "2026-11-24T10:00:00Z"
    raw["metadata"]["deletionTimestamp"] = "2026-11-24T10:05:00Z"
    scheduler.on_pod_event("MODIFIED", raw)
    assert not scheduler.state.pods[uid].preempted
    raw["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    scheduler.on_pod_event("MODIFIED", raw)
    assert scheduler.state.pods[uid].preempted


def test_a_gated_pod_nominated_by_another_component_holds_its_room() -> None:
    """KEP-5278: a queue or autoscaler nominates a pod while its scheduling gates are still
    on. kube-scheduler's nominator records gated pods too (PriorityQueue.addPod), so pods of
    no higher priority must leave the room free; once the nomination is cleared, it is not."""
    scheduler = Scheduler(
        "loadwise-scheduler",
        Binder(FakeTransport(), "loadwise-scheduler"),
        {},
        SchedulingQueue(1, 10, 60),
    )
    scheduler.on_node_event(None, manifests.node("n1", cpu="1"))
    holder = raw_pod("holder", "600m", 0, schedulingGates=[{"name": "example.com/queue"}])
    holder["status"] = {"nominatedNodeName": "n1"}
    scheduler.on_pod_event("ADDED", holder)
    incoming = parse_pod(raw_pod("incoming", "500m", 0))
    assert [p.name for p in scheduler.preemption.held_for(incoming)["n1"]] == ["holder"]
    assert not scheduler.queue.uids()  # still gated: not queued
    holder["status"] = {}
    scheduler.on_pod_event("MODIFIED", holder)
    assert scheduler.preemption.held_for(incoming) == {}


def test_a_nominated_pod_counts_under_an_empty_spread_selector_as_kube_scheduler_adds_it() -> None:
    """kube-scheduler counts no pod for an empty spread selector (countPodsMatchSelector),
    but adds each pod nominated to the node under test with `Selector.Matches`, which selects
    every pod (PodTopologySpread.AddPod): a held pod makes its node's domain one fuller.
    Found by bench/differential with nominations (seed 3: 2 of 600 disagreed)."""
    state = state_with(manifests.node("n1"), manifests.node("n2"))
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {},
    }
    pod = parse_pod(raw_pod("incoming", "100m", 0, topologySpreadConstraints=[spread]))
    holder = dataclasses.replace(
        parse_pod(raw_pod("holder", "100m", 0)), node_name="n1", assumed=True
    )
    n1, n2 = state.nodes["n1"], state.nodes["n2"]
    failed = refusal_with_nominated(CycleContext(pod, state), n1, state, FILTERS, [holder])
    assert failed is not None and failed[1] == [
        "node(s) didn't match pod topology spread constraints"
    ]
    assert refusal_with_nominated(CycleContext(pod, state), n2, state, FILTERS, []) is None
    assert (
        refusal_with_nominated(CycleContext(pod, state), n1, state, FILTERS, []) is None
    )  # not held: fits
    elsewhere = dataclasses.replace(holder, namespace="other")  # another namespace: not counted
    assert refusal_with_nominated(CycleContext(pod, state), n1, state, FILTERS, [elsewhere]) is None
    # A selector that selects something counts the held copy the ordinary way.
    spread["labelSelector"] = {"matchLabels": {"app": "none"}}
    other = parse_pod(raw_pod("incoming-2", "100m", 0, topologySpreadConstraints=[spread]))
    assert refusal_with_nominated(CycleContext(other, state), n1, state, FILTERS, [holder]) is None


def test_victims_removed_count_down_an_empty_spread_selector_as_kube_scheduler_removes_them() -> (
    None
):
    """In preemption's dry run kube-scheduler removes the victims with RemovePod, which under
    an empty selector takes one away per pod (it selects every pod) though none was counted;
    with a held pod added back (AddPod, +1) the node's domain is where it started, so the
    preemptor may preempt there. Counting the held pod alone would refuse the node."""
    state = state_with(manifests.node("n1", cpu="1"), manifests.node("n2", cpu="1"))
    place(state, "n1", "low", "600m", 0)
    place(state, "n2", "high", "900m", 1000)
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {},
    }
    holder = parse_pod(raw_pod("holder", "100m", 100))
    holder.node_name = "n1"
    vip = raw_pod("vip", "500m", 100, topologySpreadConstraints=[spread])
    assert names(run(state, vip, held={"n1": [holder]})) == ("n1", ["low"])


@pytest.mark.parametrize("enabled", [True, False])
async def test_preemption_can_be_turned_off_as_a_kube_scheduler_profile_can(enabled: bool) -> None:
    """LOADWISE_PREEMPTION=false: a pod that fits nowhere is reported unschedulable and
    nothing is evicted or nominated, where with it on the lower-priority pod is evicted."""
    transport = FakeTransport()
    scheduler = Scheduler(
        "loadwise-scheduler",
        Binder(transport, "loadwise-scheduler"),
        {},
        SchedulingQueue(1, 10, 60),
        SchedulingSettings(preemption=enabled),
    )
    scheduler.on_node_event(None, manifests.node("n1", cpu="1"))
    low = raw_pod("low", "800m", 0)
    low["spec"]["nodeName"] = "n1"
    scheduler.on_pod_event("ADDED", low)
    vip = raw_pod("vip", "500m", 100)
    vip["spec"]["schedulerName"] = "loadwise-scheduler"
    scheduler.on_pod_event("ADDED", vip)
    pod = await scheduler.queue.pop()
    await scheduler.inflight.slots.acquire()
    if not scheduler.schedule_popped(pod):
        scheduler.inflight.slots.release()
    await scheduler.drain()
    deletes = [c for c in transport.calls if c.method == "DELETE"]
    assert bool(deletes) is enabled
    assert (pod.nominated_node == "n1") is enabled
    status = [c for c in transport.calls if c.path.endswith("/vip/status")]
    assert status, "the pod is reported either way"
