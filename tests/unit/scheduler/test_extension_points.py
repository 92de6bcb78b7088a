"""The points around Filter, end to end through the Scheduler: a plugin that declares Reserve,
PreBind and Unreserve (by subclassing, nothing else) is run by the profile in kube-scheduler's
order and with its rules, for single pods and for a pod group's members; so are a PreEnqueue
plugin (pods held out of the queue, counted as gated) and a PostFilter plugin."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import pytest
from prometheus_client import REGISTRY

from loadwise.config import SchedulingSettings
from loadwise.framework.plugin import (
    CycleState,
    NoPreemption,
    PostFilterPlugin,
    PreBindPlugin,
    Preemption,
    PreEnqueuePlugin,
    ReservePlugin,
)
from loadwise.framework.plugins import DEFAULT_PLUGINS
from loadwise.framework.pod_groups import UPSTREAM
from loadwise.framework.profile import Profile
from loadwise.framework.types import PodInfo
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import MetricsCache
from loadwise_dev import manifests

from ...fakes import until
from .test_pod_groups import member, pod_group
from .test_scheduler import NAME, Api, raw_pod, running, uid


@dataclass
class Ledger(ReservePlugin, PreBindPlugin):
    """A test plugin: notes each call in `calls` (shared between plugins, to see the order);
    its Reserve or PreBind fails for the pods named in `refuse_reserve` / `fail_prebind`."""

    name: str = "Ledger"  # type: ignore[misc]  # a ClassVar on Plugin, per instance here
    calls: list[str] = field(default_factory=list)
    refuse_reserve: set[str] = field(default_factory=set)
    fail_prebind: set[str] = field(default_factory=set)
    handed: dict[str, object] = field(default_factory=dict)  # pod -> what PreBind read

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        self.calls.append(f"{self.name}.reserve {pod.name} {node}")
        if pod.name in self.refuse_reserve:
            return "no room in the ledger"
        state.write(self.name, f"token of {pod.name}")
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self.calls.append(f"{self.name}.unreserve {pod.name} {node} {state.read(self.name)}")

    def allowance(self, state: CycleState) -> float:
        return 5.0 if state.read(self.name) else 0.0

    async def prebind(
        self, state: CycleState, pod: PodInfo, node: str, waiting: Callable[[], None]
    ) -> str | None:
        self.calls.append(f"{self.name}.prebind {pod.name} {node}")
        self.handed[pod.name] = state.read(self.name)
        await asyncio.sleep(0)
        return "the ledger is closed" if pod.name in self.fail_prebind else None


class Doorman(PreEnqueuePlugin):
    """A test PreEnqueue plugin: holds the pods whose names are in `closed`; a held pod is
    asked again on its next update."""

    name = "Doorman"

    def __init__(self, closed: set[str]) -> None:
        self.closed = closed
        self.held: set[str] = set()
        self.asked: list[str] = []

    def pre_enqueue(self, pod: PodInfo) -> bool:
        self.asked.append(pod.name)
        if pod.name in self.closed:
            self.held.add(pod.uid)
            return False
        self.held.discard(pod.uid)
        return True

    def forget(self, uid: str) -> None:
        self.held.discard(uid)

    def known(self) -> Collection[str]:
        return self.held

    def holding(self) -> int:
        return len(self.held)


class NoRoomHere(PostFilterPlugin):
    """A test PostFilter plugin: never makes room, and says so."""

    name = "NoRoomHere"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def post_filter(
        self,
        pod: PodInfo,
        held: Mapping[str, list[PodInfo]],
        load_of: Callable[[str], float],
    ) -> Preemption | NoPreemption | None:
        self.asked.append(pod.name)
        return NoPreemption("the test plugin has no room either.")


def scheduler_with(
    api: Api, *plugins: Ledger | Doorman | NoRoomHere, preemption: bool = True
) -> Scheduler:
    """A scheduler whose profile is the defaults and `plugins`: nothing else is told of them."""
    return Scheduler(
        NAME,
        Binder(api.fake, NAME),
        {"prometheus": MetricsCache(None, 10.0)},
        SchedulingQueue(initial_backoff=0.05, max_backoff=0.05),
        SchedulingSettings(preemption=preemption),
        rng=random.Random(1),
        profile=Profile((*DEFAULT_PLUGINS, *plugins)),
    )


def failed_messages(api: Api) -> list[str]:
    return [str(e["message"]) for e in api.events("FailedScheduling")]


async def test_reserve_then_prebind_then_bind_with_what_reserve_left() -> None:
    api = Api()
    ledger = Ledger()
    sched = scheduler_with(api, ledger)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert ledger.calls == ["Ledger.reserve web n1", "Ledger.prebind web n1"]
    assert ledger.handed == {"web": "token of web"}
    assert sched.state.pods[uid(raw)].node_name == "n1"


async def test_a_failed_prebind_unreserves_binds_nothing_and_retries_after_backoff() -> None:
    api = Api()
    ledger = Ledger(fail_prebind={"web"})
    sched = scheduler_with(api, ledger)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web", cpu="500m")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: ledger.calls.count("Ledger.unreserve web n1 token of web") >= 2)
        ledger.fail_prebind.clear()  # the next try goes through
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert ledger.calls[:3] == [
        "Ledger.reserve web n1",
        "Ledger.prebind web n1",
        "Ledger.unreserve web n1 token of web",
    ]
    assert len(api.binds("web")) == 1  # only once PreBind succeeded
    assert failed_messages(api)[0] == 'running PreBind plugin "Ledger": the ledger is closed'


async def test_a_refused_reserve_unreserves_every_reserve_plugin_in_reverse_order() -> None:
    api = Api()
    calls: list[str] = []
    first, second = Ledger("First", calls), Ledger("Second", calls, refuse_reserve={"web"})
    sched = scheduler_with(api, first, second)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web", cpu="500m")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: bool(failed_messages(api)))
        await asyncio.sleep(0.02)
        assert uid(raw) not in sched.state.pods and sched.state.accounted_cpu() == 0
    assert calls[:4] == [
        "First.reserve web n1",
        "Second.reserve web n1",
        "Second.unreserve web n1 None",  # the one that failed, too (kube-scheduler's rule)
        "First.unreserve web n1 token of web",
    ]
    assert failed_messages(api)[0] == 'running Reserve plugin "Second": no room in the ledger'
    assert not api.binds("web")


@pytest.mark.parametrize("status", [404, 500])
async def test_a_bind_that_fails_unreserves(status: int) -> None:
    api = Api(web=[(status, {"kind": "Status", "code": status})])
    ledger = Ledger()
    sched = scheduler_with(api, ledger)
    sched.on_node_event("ADDED", manifests.node("n1"))
    async with running(sched):
        sched.on_pod_event("ADDED", raw_pod("web"))
        await until(lambda: "Ledger.unreserve web n1 token of web" in ledger.calls)
    assert ledger.calls[:3] == [
        "Ledger.reserve web n1",
        "Ledger.prebind web n1",
        "Ledger.unreserve web n1 token of web",
    ]


async def test_a_group_short_of_its_minimum_unreserves_each_member_it_had_reserved() -> None:
    api = Api()
    ledger = Ledger(refuse_reserve={"w2"})  # the third member cannot have its node
    sched = scheduler_with(api, ledger)
    sched.on_node_event("ADDED", manifests.node("n0", cpu="8"))
    pods = [member(f"w{i}", "train") for i in range(3)]
    async with running(sched):
        sched.pod_groups.on_event(UPSTREAM)("ADDED", pod_group("train", 3))
        for raw in pods:
            sched.on_pod_event("ADDED", raw)
        await until(lambda: len(failed_messages(api)) >= 3)
        await asyncio.sleep(0.02)
        assert not sched.state.pods  # nothing held
    assert not api.fake.requests("POST", "/binding")
    undone = sorted(c for c in ledger.calls if ".unreserve" in c)
    assert undone[:3] == [
        "Ledger.unreserve w0 n0 token of w0",
        "Ledger.unreserve w1 n0 token of w1",
        "Ledger.unreserve w2 n0 None",
    ]
    assert any('running Reserve plugin "Ledger"' in m for m in failed_messages(api))


def gated() -> float:
    return REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": "gated"}) or 0.0


async def test_a_pre_enqueue_plugin_holds_a_pod_out_of_the_queue_until_it_lets_it_in() -> None:
    api = Api()
    doorman = Doorman(closed={"web"})
    sched = scheduler_with(api, doorman)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await asyncio.sleep(0.1)
        assert uid(raw) not in sched.queue and not api.binds("web")  # never tried
        assert gated() == 1 and not api.events("FailedScheduling")
        doorman.closed.clear()
        sched.on_pod_event("MODIFIED", raw)  # its next update asks again
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert doorman.asked == ["web", "web"] and gated() == 0


async def test_a_pod_held_by_an_earlier_pre_enqueue_plugin_is_not_asked_by_later_ones() -> None:
    api = Api()
    first, second = Doorman(closed={"web"}), Doorman(closed={"web"})
    sched = scheduler_with(api, first, second)
    raw = raw_pod("web")
    sched.on_pod_event("ADDED", raw)
    assert first.asked == ["web"] and not second.asked and gated() == 1
    sched.relisted_pods(set())  # a relist that no longer shows it: every plugin forgets it
    assert not first.held and gated() == 0


async def test_a_post_filter_plugin_runs_for_a_pod_no_node_fits_and_its_reason_is_told() -> None:
    api = Api()
    no_room = NoRoomHere()
    sched = scheduler_with(api, no_room)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="1"))
    async with running(sched):
        sched.on_pod_event("ADDED", raw_pod("big", cpu="8"))
        await until(lambda: bool(api.events("FailedScheduling")))
    assert no_room.asked == ["big"]
    assert failed_messages(api)[0].endswith("preemption: the test plugin has no room either.")
    assert sched.profile.post_filters[-1] is sched.preemption  # DefaultPreemption after it
    off = scheduler_with(Api(), preemption=False)
    assert off.preemption not in off.profile.post_filters  # DynamicResources' stays
