"""The scheduler's metrics: kube-scheduler's names and labels where the meaning is the same, the
pending gauge following the queue as it changes (no timer), and loadwise's per-policy figures."""

from __future__ import annotations

import platform
import time
from importlib import metadata

from prometheus_client import REGISTRY

from loadwise import observability as obs
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ..fakes import until
from .scheduler.test_scheduler import NAME, Api, raw_pod, running, scheduler, uid


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def pending() -> dict[str, float]:
    return {q: value("scheduler_pending_pods", queue=q) for q in obs.QUEUES}


def test_build_info_names_the_version_and_python() -> None:
    assert value("loadwise_build_info", version=obs.version(), python=platform.python_version())
    # The installed distribution's (no constant to forget at a release), never the fallback.
    assert obs.version() == metadata.version("loadwise") != "unknown"


def test_the_pending_gauge_follows_every_queue_change_without_a_timer() -> None:
    sched = scheduler(Api())
    assert pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    sched.on_node_event("ADDED", manifests.node("n1", cpu="1"))
    a, b, big = raw_pod("a"), raw_pod("b"), raw_pod("big", cpu="8")
    for raw in (a, b, big):
        sched.on_pod_event("ADDED", raw)
    gated = raw_pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    sched.on_pod_event("ADDED", gated)
    assert pending() == {"active": 3, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert sched.profile.why_held(uid(gated)) == (  # what explain says, in upstream's words
        "SchedulingGates: Scheduling is blocked due to non-empty scheduling gates"
    )
    ungated = {**gated, "spec": {**gated["spec"], "schedulingGates": []}}
    sched.on_pod_event("MODIFIED", ungated)
    assert pending() == {"active": 4, "backoff": 0, "unschedulable": 0, "gated": 0}
    sched.on_pod_event("DELETED", b)
    assert pending()["active"] == 3
    while (pod := sched.queue.pop_nowait()) is not None:  # in flight: pending no more
        if pod.uid == uid(big):
            sched.queue.park(pod.uid)
        elif pod.uid == uid(a):
            sched.queue.backoff(pod.uid)
    assert pending() == {"active": 0, "backoff": 1, "unschedulable": 1, "gated": 0}
    sched.on_pod_event("ADDED", gated)  # gated again, then a relist that no longer shows it
    assert pending()["gated"] == 1
    sched.relisted_pods({uid(a), uid(big)})
    assert pending() == {"active": 0, "backoff": 1, "unschedulable": 1, "gated": 0}


async def test_attempts_durations_and_the_sli_have_kube_schedulers_names_and_labels() -> None:
    api = Api(retried=[(500, b"etcdserver: leader changed")])  # then 201
    sched = scheduler(api, backoff=0.05)
    sched.policies.apply("batch", {})
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    before = {
        "scheduled": value("scheduler_schedule_attempts_total", result="scheduled", profile=NAME),
        "error": value("scheduler_schedule_attempts_total", result="error", profile=NAME),
        "took": value(
            "scheduler_scheduling_attempt_duration_seconds_count",
            result="scheduled",
            profile=NAME,
        ),
        "sli1": value("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="1"),
        "sli2": value("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="2"),
        "bind": value(
            "scheduler_framework_extension_point_duration_seconds_count",
            extension_point="Bind",
            status="Success",
            profile=NAME,
        ),
        "cycles": value("scheduler_scheduling_algorithm_duration_seconds_count"),
        "requests": value("loadwise_placements_total", policy="batch", basis="requests"),
    }
    async with running(sched):
        sched.on_pod_event("ADDED", raw_pod("first"))
        sched.on_pod_event("ADDED", raw_pod("retried"))
        await until(lambda: len(api.events("Scheduled")) == 2)
    assert (
        value("scheduler_schedule_attempts_total", result="scheduled", profile=NAME)
        == before["scheduled"] + 2
    )
    assert value("scheduler_schedule_attempts_total", result="error", profile=NAME) == (
        before["error"] + 1
    )
    assert (
        value(
            "scheduler_scheduling_attempt_duration_seconds_count", result="scheduled", profile=NAME
        )
        == before["took"] + 2
    )
    # One pod bound at its first attempt, one at its second (the failed bind counts).
    assert value("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="1") == (
        before["sli1"] + 1
    )
    assert value("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="2") == (
        before["sli2"] + 1
    )
    assert (
        value(
            "scheduler_framework_extension_point_duration_seconds_count",
            extension_point="Bind",
            status="Success",
            profile=NAME,
        )
        == before["bind"] + 2
    )
    assert value("scheduler_scheduling_algorithm_duration_seconds_count") == before["cycles"] + 3
    # No metrics source: both placements were by requests, the policy's series say so.
    assert value("loadwise_placements_total", policy="batch", basis="requests") == (
        before["requests"] + 3
    )
    assert value("loadwise_placements_total", policy="batch", basis="metrics") == 0


async def test_hot_nodes_passed_over_and_the_estimate_are_counted_per_policy() -> None:
    api = Api()
    sched = scheduler(api)
    sched.policies.apply("hotpol", {"placementEstimate": 2})
    for name in ("hot1", "hot2", "cool"):
        sched.on_node_event("ADDED", manifests.node(name, cpu="2"))
    now = time.time()
    sched.usage.caches["prometheus"].samples = {
        "hot1": NodeSample(0.95, 0.1, now),
        "hot2": NodeSample(0.9, 0.1, now),
        "cool": NodeSample(0.2, 0.1, now),
    }
    estimate_sum = value("loadwise_placement_estimate_cpu_ratio_sum", policy="hotpol")
    async with running(sched):
        sched.on_pod_event("ADDED", raw_pod("web", cpu="500m"))
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert api.binds("web")[0].body is not None
    assert value("loadwise_hot_nodes_passed_over_total", policy="hotpol") == 2
    assert value("loadwise_all_nodes_hot_total", policy="hotpol") == 0  # created at 0
    assert value("loadwise_placements_total", policy="hotpol", basis="metrics") == 1
    # The pod being placed: 2 x 500m on a 2-core node.
    added = value("loadwise_placement_estimate_cpu_ratio_sum", policy="hotpol") - estimate_sum
    assert abs(added - 0.5) < 1e-9


async def test_the_loop_lag_histogram_sees_a_call_that_holds_the_loop() -> None:
    import asyncio

    from loadwise.upkeep import Upkeep

    def held_longer_than(seconds: float) -> float:
        total = value("loadwise_event_loop_lag_seconds_count")
        within = value("loadwise_event_loop_lag_seconds_bucket", le=str(seconds))
        return total - within

    before = held_longer_than(0.025)
    timer = asyncio.create_task(Upkeep.measure_loop_forever(tick=0.005))
    await asyncio.sleep(0.02)
    time.sleep(0.06)  # noqa: ASYNC251 - holding the loop, as a long decode would
    await asyncio.sleep(0.02)
    timer.cancel()
    assert held_longer_than(0.025) >= before + 1
