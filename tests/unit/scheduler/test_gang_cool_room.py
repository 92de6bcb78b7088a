"""The built-in policy's gang wait: a group that would put a member on a hot node waits only
while cool room is coming (scheduler/pod_groups/cool_room.py), else it is placed at once."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.pod_groups import UPSTREAM
from loadwise.framework.types import parse_pod
from loadwise.policies.policy import Policy, parse_spec
from loadwise.scheduler.pod_groups.cool_room import FREED_WINDOW, Coming, FreedRoom, warm
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...fakes import until
from ...helpers import pod_info, state_with
from .test_pod_groups import member, pod_group, with_nodes
from .test_scheduler import Api, bound, raw_pod, running, scheduler


def waits(api: Api) -> list[str]:
    return [e["message"] for e in api.events("FailedScheduling") if "cool room" in e["message"]]


def world(
    cpus: tuple[str, ...], samples: dict[str, NodeSample], bind_concurrency: int = 64
) -> tuple[Api, Scheduler]:
    """A scheduler on nodes n0, n1, ... of these CPUs, with these samples from Prometheus."""
    api = Api()
    sched = scheduler(api, bind_concurrency=bind_concurrency)
    with_nodes(sched, *cpus)
    sched.usage.caches["prometheus"].samples = samples
    return api, sched


async def test_nothing_coming_the_group_is_placed_at_once_as_it_fits() -> None:
    now = time.time()  # n0 cool, n1 hot by its sample: the group needs both
    api, sched = world(
        ("2", "2"), {"n0": NodeSample(0.1, 0.1, now), "n1": NodeSample(0.95, 0.1, now)}
    )
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 2))
    async with running(sched):
        for i in range(2):
            sched.on_pod_event("ADDED", member(f"h{i}", "g", cpu="2"))
        await until(lambda: len(api.events("Scheduled")) == 2)
    assert not waits(api)  # n1 will not cool by waiting: no departures, nothing unmeasured


async def test_a_node_hot_only_by_unmeasured_estimates_is_waited_for() -> None:
    now = time.time()  # n0 measured at 10%, but a 2-CPU pod bound since counts 1.5 x 2 of 4 CPUs
    api, sched = world(
        ("4", "2"), {"n0": NodeSample(0.1, 0.1, now - 1), "n1": NodeSample(0.95, 0.1, now)}
    )
    cache = sched.usage.caches["prometheus"]
    sched.on_pod_event("ADDED", bound(raw_pod("other", cpu="2"), "n0"))
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 1))
    async with running(sched):
        sched.on_pod_event("ADDED", member("h0", "g", cpu="1"))
        await until(lambda: bool(waits(api)))
        assert not api.fake.requests("POST", "/binding")
        assert "a node hot only by estimates of pods not measured yet" in waits(api)[0]
        # the next sample shows what the other pod uses: n0 is cool, and the group goes there
        cache.samples = {**cache.samples, "n0": NodeSample(0.3, 0.1, time.time())}
        await until(lambda: len(api.events("Scheduled")) == 1, timeout=5.0)
    (bind,) = api.binds("h0")
    assert (bind.body or {})["target"]["name"] == "n0"


async def test_requests_freed_by_departures_are_waited_for() -> None:
    now = time.time()
    api, sched = world(
        ("2", "2"), {"n0": NodeSample(0.1, 0.1, now), "n1": NodeSample(0.95, 0.1, now)}
    )
    leaving = bound(raw_pod("leaving", cpu="2"), "n0")
    sched.on_pod_event("ADDED", leaving)
    sched.on_pod_event("DELETED", leaving)  # 2 CPUs freed: 2/60 CPU per second measured
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 2))
    async with running(sched):
        for i in range(2):
            sched.on_pod_event("ADDED", member(f"h{i}", "g", cpu="2"))
        await until(lambda: bool(waits(api)))
        (message, *_) = waits(api)
        assert "cool room is coming: requests freed at 0.03 CPU/s" in message
        assert not api.fake.requests("POST", "/binding")  # it waits, holding nothing
        assert not sched.state.pods


def hot_waits() -> float:
    return (
        REGISTRY.get_sample_value("loadwise_pod_group_decisions_total", {"result": "hot_wait"})
        or 0.0
    )


async def test_a_waiting_group_is_told_again_only_when_more_than_its_figures_change() -> None:
    now = time.time()  # the departures test's world; its rate changes while the group waits
    samples = {"n0": NodeSample(0.1, 0.1, now), "n1": NodeSample(0.95, 0.1, now)}
    api, sched = world(("2", "2"), samples, bind_concurrency=2)  # a slot kept must come back
    leaving = [bound(raw_pod(f"leaving-{i}", cpu="2"), "n0") for i in range(2)]
    sched.on_pod_event("ADDED", leaving[0])
    sched.on_pod_event("DELETED", leaving[0])
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 2))
    async with running(sched):
        for i in range(2):
            sched.on_pod_event("ADDED", member(f"h{i}", "g", cpu="2"))
        await until(lambda: len(waits(api)) == 2)  # each member told once
        sched.on_pod_event("ADDED", leaving[1])
        sched.on_pod_event("DELETED", leaving[1])  # the rate doubles: 0.03 -> 0.07 CPU/s
        tried = hot_waits()
        await until(lambda: hot_waits() >= tried + 4, timeout=8.0)  # tries go on, untold
    assert len(waits(api)) == 2  # not an event and a status patch per member and try
    assert "0.03 CPU/s" in waits(api)[0]


async def test_pods_that_run_to_completion_are_waited_for() -> None:
    now = time.time()  # n2 is full with a Job's pod: its room comes back
    samples = {n: NodeSample(cpu, 0.1, now) for n, cpu in (("n0", 0.1), ("n1", 0.95), ("n2", 0.5))}
    api, sched = world(("2", "2", "4"), samples)
    job = raw_pod("job-0", cpu="4")
    job["spec"]["restartPolicy"] = "Never"
    sched.on_pod_event("ADDED", bound(job, "n2"))
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 2))
    async with running(sched):
        for i in range(2):
            sched.on_pod_event("ADDED", member(f"h{i}", "g", cpu="2"))
        await until(lambda: bool(waits(api)))
        assert "pods that run to completion hold 4.0 CPU" in waits(api)[0]
        assert not api.fake.requests("POST", "/binding")


async def test_a_members_node_is_judged_by_its_peak_over_the_last_two_minutes() -> None:
    now = time.time()  # n0 at 95% 20 s ago, 20% now: a member passes it over, a lone pod not
    then = {"n0": NodeSample(0.95, 0.1, now - 20), "n1": NodeSample(0.4, 0.1, now - 20)}
    latest = {"n0": NodeSample(0.2, 0.1, now), "n1": NodeSample(0.4, 0.1, now)}
    api, sched = world(("8", "8"), latest)
    history = sched.usage.caches["prometheus"].history
    history.keep = 60.0  # as the cache records its refreshes
    history.record(then)
    history.record(latest)
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 1))
    async with running(sched):
        sched.on_pod_event("ADDED", member("m0", "g", cpu="1"))
        await until(lambda: len(api.events("Scheduled")) == 1)
        sched.on_pod_event("ADDED", raw_pod("lone", cpu="1"))
        await until(lambda: len(api.events("Scheduled")) == 2)
    assert [(b.body or {})["target"]["name"] for b in api.binds("m0")] == ["n1"]
    assert [(b.body or {})["target"]["name"] for b in api.binds("lone")] == ["n0"]
    assert history.keep >= 60.0  # kept for members from the first one on


async def test_a_members_peak_leaves_out_a_pod_that_has_left_the_node_since() -> None:
    now = time.time()  # n0 was at 95% 20 s ago with a 6-CPU pod of 8 on it, which has left
    then = {"n0": NodeSample(0.95, 0.1, now - 20), "n1": NodeSample(0.4, 0.1, now - 20)}
    latest = {"n0": NodeSample(0.2, 0.1, now), "n1": NodeSample(0.4, 0.1, now)}
    api, sched = world(("8", "8"), latest)
    history = sched.usage.caches["prometheus"].history
    history.keep = 60.0
    history.record(then)
    history.record(latest)
    gone = bound(raw_pod("gone", cpu="6"), "n0")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 100))
    gone["status"] = {
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": since}]
    }
    sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("g", 1))
    async with running(sched):
        sched.on_pod_event("ADDED", gone)
        sched.on_pod_event("DELETED", gone)
        sched.on_pod_event("ADDED", member("m0", "g", cpu="1"))
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert [(b.body or {})["target"]["name"] for b in api.binds("m0")] == ["n0"]


def test_freed_room_is_a_rate_over_its_window() -> None:
    clock = [100.0]
    freed = FreedRoom(lambda: clock[0])
    freed.freed(parse_pod(bound(raw_pod("a", cpu="3"), "n0"), placed=True))
    freed.freed(parse_pod(raw_pod("pending", cpu="5")))  # on no node: frees nothing
    assert freed.rate() == 3000 / FREED_WINDOW
    clock[0] += FREED_WINDOW + 1
    assert freed.rate() == 0


def test_coming_is_within_a_wait_when_measured_rates_free_the_hot_members() -> None:
    assert Coming(1, 0.0, 5000).within(0.5)  # the next samples decide
    assert Coming(0, 100.0, 5000).within(50.0)
    assert not Coming(0, 100.0, 5000).within(49.0)
    assert not Coming(0, 0.0, 5000).within(120.0)
    assert Coming(0, 0.0, 5000, finishing=5000).within(120.0)  # no rate yet: they will finish
    assert Coming(0, 10.0, 5000, finishing=9000).within(120.0)  # when: the limit bounds it
    assert not Coming(0, 10.0, 5000, finishing=4000).within(120.0)  # the rate says too slow
    assert not Coming(0, 0.0, 5000, finishing=5000).within(0.0)


@pytest.mark.parametrize(
    ("measured", "seen", "warmed"),
    [
        (0.5, 0.0, False),  # with it 65%: cool
        (0.6, 0.0, True),  # 75%: within 10 points of hot, judged by a short history
        (0.6, 60.0, True),  # half a window does not show the node's swing
        (0.6, 115.0, False),  # a whole window's peak does: within 5 points only
        (0.66, 115.0, True),  # 81%: hot
        (0.95, 0.0, True),  # 110%
    ],
)
def test_a_member_is_warm_when_it_would_bring_its_node_within_the_band_of_hot(
    measured: float, seen: float, warmed: bool
) -> None:
    state = state_with(manifests.node("n0", cpu="10"))
    now = time.time()
    sample = NodeSample(measured, 0.1, now, seen=seen)
    basis = Basis(Policy("p", parse_spec({})), {"n0": sample}, now)
    result = schedule_one(pod_info("m", cpu="1"), state, basis)  # its estimate: 1.5 of 10 cpu
    assert isinstance(result, Decision)
    assert warm(result, state, basis) is warmed
