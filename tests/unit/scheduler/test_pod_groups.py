"""Pod groups through the Scheduler: members held until their group is ready, the group placed
as a whole or not at all, its PodGroup told, a failed member bind, mixed schedulers, and a
group deleted while its members wait."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import REGISTRY

from loadwise.framework.pod_groups import COSCHEDULING, COSCHEDULING_LABEL, UPSTREAM, PodGroupKey
from loadwise.scheduler.binding.binder import MERGE_PATCH
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...fakes import until
from .test_scheduler import Api, bound, raw_pod, running, scheduler, uid

NS = "default"


def member(name: str, group: str, cpu: str = "1", **kw: Any) -> dict[str, Any]:
    raw = raw_pod(name, cpu=cpu, **kw)
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    return raw


def pod_group(name: str, minimum: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": minimum}}, **spec},
    }


def _key(name: str) -> PodGroupKey:
    return PodGroupKey(UPSTREAM, NS, name)


def with_nodes(sched: Scheduler, *cpus: str) -> None:
    for index, cpu in enumerate(cpus):
        sched.on_node_event("ADDED", manifests.node(f"n{index}", cpu=cpu))


def condition_patches(api: Api, group: str) -> list[dict[str, Any]]:
    calls = api.fake.requests("PATCH", f"/podgroups/{group}/status")
    assert all(c.content_type == MERGE_PATCH for c in calls)
    return [c.body["status"]["conditions"][-1] for c in calls if c.body is not None]


async def test_members_wait_for_their_podgroup_and_minimum_then_bind_together() -> None:
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "4", "4")
    pods = [member(f"w{i}", "train") for i in range(4)]
    async with running(sched):
        for raw in pods[:3]:
            sched.on_pod_event("ADDED", raw)
        await asyncio.sleep(0.1)
        assert not api.fake.requests("POST", "/binding")  # no PodGroup yet
        sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("train", 4))
        await asyncio.sleep(0.1)
        assert not api.fake.requests("POST", "/binding")  # 3 of 4 exist
        assert dict(sched.pod_groups.waiting()) == {_key("train"): 3}
        assert not api.events("FailedScheduling")  # waiting is silent, as upstream
        sched.on_pod_event("ADDED", pods[3])
        await until(lambda: len(api.events("Scheduled")) == 4)
        await sched.drain()
    assert {sched.state.pods[uid(p)].node_name for p in pods} == {"n0", "n1"}
    (condition,) = condition_patches(api, "train")
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupInitiallyScheduled",
        "True",
        "Scheduled",
    )


async def test_a_group_that_cannot_reach_its_minimum_holds_nothing_and_every_member_is_told() -> (
    None
):
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "2", "2")  # room for 4 members of 1 cpu; the group needs 5
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("big", 5))
    pods = [member(f"b{i}", "big") for i in range(5)]
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("FailedScheduling")) == 5)
        await sched.drain()
        assert not api.fake.requests("POST", "/binding")
        assert not sched.state.pods and sched.state.accounted_cpu() == 0  # nothing held
        assert sched.queue.counts()["unschedulable"] == 5
    messages = sorted(e["message"] for e in api.events("FailedScheduling"))
    group_words = (
        "pod group is unschedulable, minCount (5) cannot be satisfied: 4 scheduled, 0 remaining "
        "(pod group default/big)"
    )
    assert messages[-1] == group_words  # the four that fitted
    assert messages[0].startswith("0/2 nodes are available: 2 Insufficient cpu.; ")
    assert messages[0].endswith(group_words)  # the one that did not: its own reason too
    (condition,) = condition_patches(api, "big")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == group_words


async def test_a_member_whose_bind_fails_is_retried_alone_with_its_siblings_counted() -> None:
    api = Api(g1=[(500, b"etcdserver: leader changed")])  # then 201
    sched = scheduler(api, backoff=0.1)
    with_nodes(sched, "8")
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 3))
    pods = [member(f"g{i}", "g") for i in range(3)]
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("Scheduled")) == 2)
        for raw in (pods[0], pods[2]):  # the watch shows the two that landed
            sched.on_pod_event("MODIFIED", bound(raw, "n0"))
        await until(lambda: len(api.events("Scheduled")) == 3)
    assert len(api.binds("g1")) == 2 and len(api.binds("g0")) == 1
    assert sched.state.pod_group_members[_key("g")] == 3


async def test_a_group_mixing_schedulers_is_refused_as_kube_scheduler_refuses_it() -> None:
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "8")
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("mixed", 3))
    ours = [member(f"m{i}", "mixed") for i in range(2)]
    theirs = member("m2", "mixed")
    theirs["spec"]["schedulerName"] = "default-scheduler"
    async with running(sched):
        sched.on_pod_event("ADDED", theirs)
        for raw in ours:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("FailedScheduling")) == 2)
        await sched.drain()
    assert not api.fake.requests("POST", "/binding")
    assert {e["message"] for e in api.events("FailedScheduling")} == {
        "all pods in a single pod group should have the same .spec.schedulerName set, "
        'got: "default-scheduler" and "loadwise-scheduler"'
    }
    (condition,) = condition_patches(api, "mixed")
    assert condition["reason"] == "SchedulerError"


async def test_a_coscheduling_group_by_label_and_a_group_deleted_while_members_wait() -> None:
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "8")
    pods = [raw_pod(f"c{i}", cpu="1") for i in range(2)]
    for raw in pods:
        raw["metadata"]["labels"] = {COSCHEDULING_LABEL: "spark"}
    cosched = {
        "metadata": {"name": "spark", "namespace": NS},
        "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30},
    }
    sched.pod_groups.on_event(COSCHEDULING)("ADDED", cosched)
    sched.pod_groups.on_event(COSCHEDULING)("DELETED", cosched)  # gone before its members came
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await asyncio.sleep(0.1)
        assert not api.fake.requests("POST", "/binding") and len(sched.pod_groups.held) == 2
        sched.pod_groups.on_event(COSCHEDULING)("ADDED", cosched)
        await until(lambda: len(api.events("Scheduled")) == 2)
        await sched.drain()
    (phase,) = api.fake.requests("PATCH", "/podgroups/spark/status")  # coscheduling's phase
    assert phase.body == {"status": {"phase": "Scheduling"}}
    assert "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/" in phase.path
    sched.relisted_pods(set())  # a relist without them: nothing of the group is kept
    assert not sched.pod_groups.held and not sched.pod_groups.pending


async def test_members_waiting_past_the_timeout_are_told_why_and_nothing_is_held() -> None:
    api = Api()
    sched = scheduler(api, gang_wait_timeout=0.2)
    with_nodes(sched, "8")
    timed_out = REGISTRY.get_sample_value("loadwise_pod_groups_timed_out_total") or 0.0
    pods = [member(f"t{i}", "late") for i in range(2)]
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("FailedScheduling")) == 2)
        assert {e["message"] for e in api.events("FailedScheduling")} == {
            "pod group default/late does not exist: its members wait for it"
        }
        sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("late", 3))  # 2 of 3 ever come
        await until(lambda: len(api.events("FailedScheduling")) == 4, timeout=3.0)
        assert not sched.state.pods and not api.fake.requests("POST", "/binding")
    assert {e["message"] for e in api.events("FailedScheduling")[2:]} == {
        "waiting for minCount pods from a gang to appear in scheduling queue: 2 of 3 exist "
        "(pod group default/late)"
    }
    assert REGISTRY.get_sample_value("loadwise_pod_groups_timed_out_total") == timed_out + 1


async def test_a_group_preempts_only_when_its_whole_minimum_then_fits() -> None:
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "2", "2")
    low = [raw_pod(f"low{i}", cpu="2") for i in range(2)]
    for index, raw in enumerate(low):
        sched.on_pod_event("ADDED", bound(raw, f"n{index}"))
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("urgent", 2, priority=100))
    pods = [member(f"u{i}", "urgent", cpu="2") for i in range(2)]
    for raw in pods:
        raw["spec"]["priority"] = 100
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.fake.requests("DELETE", "/pods/low")) == 2)
        await until(lambda: len(api.events("Preempting")) == 1)
        assert not api.fake.requests("POST", "/binding")
        nominated = {p.name: p.nominated_node for p in sched.preemption.nominated.values()}
        assert nominated == {"u0": "n0", "u1": "n1"} or nominated == {"u0": "n1", "u1": "n0"}
        for raw in low:  # the victims go
            sched.on_pod_event("DELETED", raw)
        await until(lambda: len(api.events("Scheduled")) == 2)
    (preempting,) = api.events("Preempting")
    assert preempting["message"].startswith(
        "Preempting 2 pod(s) to make room for pod group default/urgent: "
    )


async def test_a_victim_whose_group_is_disrupted_as_one_takes_its_whole_group() -> None:
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "2", "2")
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("batch", 2, disruptionMode={"all": {}}))
    for index in range(2):
        sched.on_pod_event("ADDED", bound(member(f"b{index}", "batch", cpu="2"), f"n{index}"))
    urgent = raw_pod("urgent", cpu="2")
    urgent["spec"]["priority"] = 100
    async with running(sched):
        sched.on_pod_event("ADDED", urgent)
        await until(lambda: len(api.events("Preempting")) == 1)
        await until(lambda: len(api.fake.requests("DELETE", "/pods/b")) == 2)
    (preempting,) = api.events("Preempting")
    assert preempting["message"].startswith("Preempting 2 pod(s) on node ")


async def test_coscheduling_min_resources_beyond_the_clusters_free_room_refuse_the_group() -> None:
    api = Api()
    sched = scheduler(api)
    with_nodes(sched, "4", "4")
    pods = [raw_pod(f"r{i}", cpu="1") for i in range(2)]
    for raw in pods:
        raw["metadata"]["labels"] = {COSCHEDULING_LABEL: "greedy"}
    cosched = {
        "metadata": {"name": "greedy", "namespace": NS},
        "spec": {"minMember": 2, "minResources": {"cpu": "9", "memory": "1Gi"}},
    }
    sched.pod_groups.on_event(COSCHEDULING)("ADDED", cosched)
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("FailedScheduling")) == 2)
        assert not api.fake.requests("POST", "/binding")
        assert {e["message"] for e in api.events("FailedScheduling")} == {
            "pod group default/greedy: the cluster's free room is short of minResources by cpu 1000"
        }
        cosched["spec"]["minResources"] = {"cpu": "8"}
        sched.pod_groups.on_event(COSCHEDULING)("MODIFIED", cosched)  # its members are retried
        await until(lambda: len(api.events("Scheduled")) == 2)


async def test_odd_groups_never_crash_the_loop_nor_hold_room() -> None:
    api = Api()
    sched = scheduler(api, gang_wait_timeout=0.2)
    with_nodes(sched, "1")
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("priced", 2, priority=10))
    priced = [member(f"p{i}", "priced", cpu="100m") for i in range(2)]  # priority 0, not 10
    sched.pod_groups.on_event(COSCHEDULING)(
        "ADDED", {"metadata": {"name": "bad", "namespace": NS}, "spec": {"minMember": 0}}
    )
    bad = raw_pod("bad-0", cpu="100m")
    bad["metadata"]["labels"] = {COSCHEDULING_LABEL: "bad"}
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("gone", 2))
    gone = [member(f"g{i}", "gone", cpu="1") for i in range(2)]  # fit only together: 2 of 1 cpu
    async with running(sched):
        for raw in [*priced, bad, *gone]:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("FailedScheduling")) >= 5, timeout=3.0)
        sched.pod_groups.on_event(UPSTREAM)("DELETED", pod_group("gone", 2))  # while they wait
        sched.on_node_event("ADDED", manifests.node("n9", cpu="1"))  # room: they are retried
        await asyncio.sleep(0.3)
        assert not api.fake.requests("POST", "/binding") and not sched.state.pods
        assert {uid(p) for p in gone} <= set(sched.pod_groups.held)  # held again, holding nothing
        sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("gone", 2))
        await until(lambda: len(api.events("Scheduled")) == 2)
    messages = {e["involvedObject"]["name"]: e["message"] for e in api.events("FailedScheduling")}
    assert messages["p0"] == (
        "all pods in a single pod group should have the same priority as the pod group's "
        "priority, got 0 and 10"
    )
    assert messages["bad-0"] == (
        "pod group default/bad cannot be read: spec.minMember: 0 is not a count of at least 1"
    )
    assert {e["involvedObject"]["name"] for e in api.events("Scheduled")} == {"g0", "g1"}


async def test_members_nominated_by_their_groups_preemption_are_not_held_against_each_other() -> (
    None
):
    """Nominated siblings held against each other (each counted on its node, as kube-scheduler
    counts nominated pods) made a spread-constrained group refuse itself for ever, after the
    preemption that nominated them (found by bench/gang-differential --preemption)."""
    api = Api()
    sched = scheduler(api)
    for name, zone in (("a", "za"), ("b", "zb")):
        node = manifests.node(name, cpu="4", labels={"topology.kubernetes.io/zone": zone})
        sched.on_node_event("ADDED", node)
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("spread", 3))
    pods = []
    for index, nominated in enumerate(("a", "b", "a")):
        raw = member(f"s{index}", "spread", cpu="1", labels={"app": "web"})
        raw["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}},
        }]  # fmt: skip
        raw["status"] = {"nominatedNodeName": nominated}
        pods.append(raw)
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("Scheduled")) == 3)
    assert sorted(sched.state.pods[uid(p)].node_name for p in pods) == ["a", "a", "b"]


async def test_a_group_that_fits_only_on_a_hot_node_waits_for_cool_room_as_its_policy_says() -> (
    None
):
    api = Api()
    sched = scheduler(api)
    sched.policies.apply("gangs", {"gangHotWaitSeconds": 1})
    with_nodes(sched, "2", "2")  # n0 cool, n1 hot: the group needs both
    now = time.time()
    cache = sched.usage.caches["prometheus"]
    cache.samples = {"n0": NodeSample(0.1, 0.1, now), "n1": NodeSample(0.95, 0.1, now)}
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 2))
    pods = [member(f"h{i}", "g", cpu="2") for i in range(2)]
    started = asyncio.get_running_loop().time()
    async with running(sched):
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("FailedScheduling")) == 2)
        assert not api.fake.requests("POST", "/binding")  # it waits, holding nothing
        assert not sched.state.pods
        (message,) = {e["message"] for e in api.events("FailedScheduling")}
        assert message == (
            "pod group default/g waits up to 1s for cool room (policy gangs, "
            "gangHotWaitSeconds 1): 2 member(s) would land on a hot node"
        )
        await until(lambda: len(api.events("Scheduled")) == 2, timeout=5.0)
    first_bind = api.binds("h0")[0].at
    assert first_bind - started >= 1.0  # not before its wait was out
