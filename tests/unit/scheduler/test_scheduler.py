"""The Scheduler between its queue and the network: every bind outcome, the unschedulable report
and its de-duplication, and leadership loss, with the Binder over the FakeTransport."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from loadwise.config import SchedulingSettings
from loadwise.kube.transport import STRATEGIC_MERGE
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import MetricsCache
from loadwise_dev import manifests

from ...fakes import Call, FakeTransport, Reply, background, forever, until

NAME = "loadwise-scheduler"
_uids = itertools.count()

Outcome = Reply | BaseException | asyncio.Event  # an Event: hold the call until it is set


def raw_pod(name: str, cpu: str = "100m", **kw: Any) -> dict[str, Any]:
    raw = manifests.pod(name, cpu=cpu, **kw)
    raw["metadata"]["uid"] = f"uid-{name}-{next(_uids)}"
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return raw


def bound(raw: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The pod as the watch shows it once its Binding landed."""
    return {**raw, "spec": {**raw["spec"], "nodeName": node}}


class Api:
    """Bindings answered from a script, in order, per pod name (201 once the script is used
    up); every other write succeeds."""

    def __init__(self, **scripts: list[Outcome]) -> None:
        self.scripts = scripts
        self.fake = FakeTransport(self.handle)

    async def handle(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        if not path.endswith("/binding"):
            return (201 if method == "POST" else 200), {}
        script = self.scripts.get(path.split("/")[-2]) or []
        outcome = script.pop(0) if script else (201, {})
        if isinstance(outcome, asyncio.Event):
            await outcome.wait()
            return 201, {}
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def binds(self, pod: str) -> list[Call]:
        return self.fake.requests("POST", f"/pods/{pod}/binding")

    def events(self, reason: str) -> list[Mapping[str, Any]]:
        return [
            c.body
            for c in self.fake.requests("POST", "/events")
            if c.body is not None and c.body["reason"] == reason
        ]

    def status_patches(self, pod: str) -> list[Call]:
        return self.fake.requests("PATCH", f"/pods/{pod}/status")


def scheduler(
    api: Api,
    backoff: float = 0.05,
    failure_event_interval: float = 60.0,
    gang_wait_timeout: float = 60.0,
    bind_concurrency: int = 64,
) -> Scheduler:
    return Scheduler(
        NAME,
        Binder(api.fake, NAME),
        {"prometheus": MetricsCache(None, 10.0)},
        SchedulingQueue(initial_backoff=backoff, max_backoff=backoff),
        SchedulingSettings(
            failure_event_interval=failure_event_interval,
            gang_wait_timeout=gang_wait_timeout,
            bind_concurrency=bind_concurrency,
        ),
        rng=random.Random(1),
    )


@contextlib.asynccontextmanager
async def running(sched: Scheduler) -> AsyncIterator[asyncio.Task[Any]]:
    try:
        async with background(sched.run()) as task:
            yield task
    finally:
        await sched.drain()
        await sched.events.stop()
        await sched.close()


def attempts(result: str) -> float:
    value = REGISTRY.get_sample_value(
        "scheduler_schedule_attempts_total", {"result": result, "profile": NAME}
    )
    return value or 0.0


def unschedulable_attempts() -> float:
    return attempts("unschedulable")


def uid(raw: Mapping[str, Any]) -> str:
    return str(raw["metadata"]["uid"])


async def test_bound_writes_the_decision_and_keeps_the_reservation_until_the_watch() -> None:
    api = Api()
    sched = scheduler(api)
    sched.policies.apply("batch", {"weights": {"cpu": 1, "memory": 1}})
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    raw = raw_pod("web", cpu="500m")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.binds("web")) == 1 and not sched.inflight.tasks)
        await sched.drain()
        held = sched.state.pods[uid(raw)]
        assert held.assumed and held.bind_landed and held.node_name == "n1"
        assert sched.state.accounted_cpu() == 500  # reserved until the watch confirms
        assert uid(raw) not in sched.queue
        (event,) = api.events("Scheduled")
        assert event["type"] == "Normal" and event["involvedObject"]["uid"] == uid(raw)
        assert event["message"].startswith(
            "Successfully assigned default/web to n1 (decision 1); score "
        )
        assert "by requests" in event["message"] and event["message"].endswith("; policy batch")
        sched.on_pod_event("MODIFIED", bound(raw, "n1"))  # the watch catches up
        confirmed = sched.state.pods[uid(raw)]
        assert not confirmed.assumed and sched.state.accounted_cpu() == 500
        await asyncio.sleep(0.15)  # several backoffs: nothing is ever retried
    assert len(api.binds("web")) == 1


async def test_an_unreadable_2xx_body_is_still_bound() -> None:
    api = Api(web=[(201, b"\x00garbage")])
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert sched.state.pods[uid(raw)].bind_landed and len(api.binds("web")) == 1


@pytest.mark.parametrize("status", [404, 409])
async def test_gone_or_conflict_releases_the_reservation_and_is_not_retried(status: int) -> None:
    api = Api(web=[(status, {"kind": "Status", "code": status})])
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web", cpu="500m")
    errors = attempts("error")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.binds("web")) == 1 and not sched.inflight.tasks)
        assert uid(raw) not in sched.state.pods and sched.state.accounted_cpu() == 0
        assert uid(raw) not in sched.queue
        await asyncio.sleep(0.2)  # four backoffs
    assert len(api.binds("web")) == 1 and not api.events("Scheduled")
    # A failed bind, counted as kube-scheduler counts it (it was counted in no result).
    assert attempts("error") == errors + 1


@pytest.mark.parametrize(
    "failure",
    [
        (500, b"etcdserver: leader changed"),
        TimeoutError(),
        aiohttp.ClientConnectionError("connection reset"),
    ],
    ids=["500", "timeout", "connection"],
)
async def test_an_error_releases_the_reservation_and_retries_after_backoff(
    failure: Reply | BaseException,
) -> None:
    api = Api(web=[failure])  # then 201
    sched = scheduler(api, backoff=0.3)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = raw_pod("web", cpu="500m")
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.binds("web")) == 1 and not sched.inflight.tasks)
        assert uid(raw) not in sched.state.pods and sched.state.accounted_cpu() == 0
        assert sched.queue.counts()["backoff"] == 1
        await until(lambda: len(api.events("Scheduled")) == 1)
    first, second = api.binds("web")
    assert second.at - first.at >= 0.3 - 0.01  # not before its backoff
    assert sched.state.pods[uid(raw)].bind_landed and sched.state.accounted_cpu() == 500


async def test_unschedulable_is_reported_once_and_again_after_the_interval_or_a_new_reason() -> (
    None
):
    api = Api()
    sched = scheduler(api, failure_event_interval=0.4)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="1"))
    raw = raw_pod("big", cpu="2")
    before = unschedulable_attempts()
    async with running(sched):
        sched.on_pod_event("ADDED", raw)
        await until(lambda: len(api.status_patches("big")) == 1)
        (event,) = api.events("FailedScheduling")
        assert event["type"] == "Warning"
        assert event["message"] == "0/1 nodes are available: 1 Insufficient cpu."
        patch = api.status_patches("big")[0]
        assert patch.content_type == STRATEGIC_MERGE
        assert (patch.body or {})["status"]["conditions"][0]["reason"] == "Unschedulable"
        assert sched.queue.counts()["unschedulable"] == 1

        # The same failure again within the interval: not re-reported.
        sched.on_node_event("MODIFIED", manifests.node("n1", cpu="1", labels={"x": "1"}))
        await until(lambda: unschedulable_attempts() == before + 2)
        await sched.drain()
        assert len(api.events("FailedScheduling")) == 1 and len(api.status_patches("big")) == 1

        # A new reason: reported at once.
        sched.on_node_event("ADDED", manifests.node("n2", cpu="4", ready=False))
        await until(lambda: len(api.events("FailedScheduling")) == 2)
        assert api.events("FailedScheduling")[1]["message"].startswith("0/2 nodes are available")
        await until(lambda: len(api.status_patches("big")) == 2)

        # The same message once the interval has passed: reported again.
        await asyncio.sleep(0.45)
        sched.on_node_event("MODIFIED", manifests.node("n1", cpu="1", labels={"x": "2"}))
        await until(lambda: len(api.events("FailedScheduling")) == 3)
        assert (
            api.events("FailedScheduling")[2]["message"]
            == (api.events("FailedScheduling")[1]["message"])
        )
        await until(lambda: len(api.status_patches("big")) == 3)
    assert not api.binds("big")


async def test_abandon_cancels_binds_in_flight_and_requeues_their_pods_not_landed_ones() -> None:
    hold = asyncio.Event()
    api = Api(slow=[hold])  # "slow" hangs; "fast" binds at once
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    fast, slow = raw_pod("fast", cpu="500m"), raw_pod("slow", cpu="700m")
    task = asyncio.create_task(sched.run())
    sched.on_pod_event("ADDED", fast)
    await until(lambda: len(api.events("Scheduled")) == 1)
    sched.on_pod_event("ADDED", slow)
    await until(lambda: len(api.binds("slow")) == 1)
    assert sched.state.accounted_cpu() == 1200

    task.cancel()  # leadership lost: what Runtime._lost does
    sched.abandon()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await sched.drain()
    assert uid(slow) not in sched.state.pods and sched.queue.counts()["active"] == 1
    assert sched.state.pods[uid(fast)].bind_landed and uid(fast) not in sched.queue
    assert sched.state.accounted_cpu() == 500  # only the landed bind keeps its reservation
    assert sched.inflight.slots._value == 64  # every slot came back

    async with running(sched):  # a later term starts from the truth
        await until(lambda: len(api.events("Scheduled")) == 2)
    assert len(api.binds("slow")) == 2 and len(api.binds("fast")) == 1
    assert sched.state.accounted_cpu() == 1200


async def test_a_report_in_flight_is_cancelled_by_abandon_and_frees_its_slot() -> None:
    async def hung(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        await forever()
        raise AssertionError("unreachable")

    api = Api()
    api.fake.handler = hung
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="1"))
    task = asyncio.create_task(sched.run())
    sched.on_pod_event("ADDED", raw_pod("big", cpu="2"))
    await until(lambda: len(api.events("FailedScheduling")) == 1)
    assert sched.inflight.slots._value == 62  # the report's, and the loop's for its next pod
    task.cancel()
    sched.abandon()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.wait_for(sched.drain(), 1.0)
    assert sched.inflight.slots._value == 64 and sched.queue.counts()["unschedulable"] == 1
    await sched.events.stop()


# --- a term that ends leaves no reservation behind ---------------------------------------------
async def test_a_loop_cancelled_just_as_the_queue_wakes_stops_and_places_nothing() -> None:
    """On Python 3.11 asyncio.wait_for swallows a cancellation that arrives together with the
    wake-up: the loop of a replica that had lost the lease went on binding."""
    api = Api()
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    task = asyncio.create_task(sched.run())
    await asyncio.sleep(0.01)  # the loop waits in queue.pop
    raw = raw_pod("late", cpu="500m")
    sched.on_pod_event("ADDED", raw)  # wakes the queue...
    await asyncio.sleep(0)  # ...and the wake-up is delivered
    task.cancel()  # leadership lost at that moment: what Runtime._lost does
    sched.abandon()
    await asyncio.sleep(0.05)
    assert task.done()
    assert not api.binds("late") and uid(raw) not in sched.state.pods
    assert sched.queue.counts()["active"] == 1 and sched.inflight.slots._value == 64
    await sched.events.stop()


async def test_a_bind_cancelled_before_it_starts_releases_its_reservation_and_slot() -> None:
    api = Api()
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    raw = raw_pod("early", cpu="500m")
    sched.on_pod_event("ADDED", raw)
    await sched.inflight.slots.acquire()  # what the loop does before it pops
    pod = sched.queue.pop_nowait()
    assert pod is not None and sched.schedule_popped(pod)
    assert sched.state.accounted_cpu() == 500
    for task in list(sched.inflight.tasks):
        task.cancel()  # before its first step: its own `finally` would never run
    await asyncio.sleep(0.01)
    assert not api.binds("early") and uid(raw) not in sched.state.pods
    assert sched.queue.counts()["active"] == 1 and sched.inflight.slots._value == 64
    async with running(sched):  # and it is placed by the next attempt
        await until(lambda: len(api.events("Scheduled")) == 1)


async def test_the_audit_releases_a_reservation_no_bind_settles() -> None:
    hold = asyncio.Event()
    api = Api(held=[hold])
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    orphan, held = raw_pod("orphan", cpu="300m"), raw_pod("held", cpu="700m")
    # A reservation with no bind behind it (what the old loop left after a lost term).
    sched.on_pod_event("ADDED", orphan)
    pod = sched.queue.pop_nowait()
    assert pod is not None
    sched.state.assume(pod, "n1")
    sched.queue.done(pod.uid)
    async with running(sched):
        sched.on_pod_event("ADDED", held)
        await until(lambda: len(api.binds("held")) == 1)
        assert sched.audit_reservations(bound=40.0) == 1  # the orphan, at once
        assert REGISTRY.get_sample_value("loadwise_stale_reservations") == 1
        await until(lambda: len(api.events("Scheduled")) == 1)  # the orphan, placed again
        assert sched.state.pods[uid(orphan)].bind_landed
        # A bind that has not answered within the bound: cancelled, released, queued again.
        sched.state.assumed[uid(held)] -= 100.0
        assert sched.oldest_reservation() > 100.0
        assert sched.audit_reservations(bound=40.0) == 1
        await until(lambda: len(api.binds("held")) == 2)  # the retry is answered at once
        await until(lambda: len(api.events("Scheduled")) == 2)
        assert sched.audit_reservations(bound=40.0) == 0
        assert REGISTRY.get_sample_value("loadwise_stale_reservations") == 0
        assert sched.oldest_reservation() == 0.0
    assert sched.state.accounted_cpu() == 1000


async def test_a_resize_seen_in_a_placed_pods_status_is_accounted_and_a_shrink_requeues() -> None:
    """The kubelet writes a resize to the status only (the generation does not move): the
    cheap path for status churn must still re-read the pod (KEP-1287)."""
    api = Api()
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    placed = bound(raw_pod("placed", cpu="500m", scheduler_name="default-scheduler"), "n1")
    placed["spec"]["containers"][0]["name"] = "app"
    sched.on_pod_event("ADDED", placed)
    assert sched.state.accounted_cpu() == 500

    def with_status(cpu: str) -> dict[str, Any]:
        status = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "allocatedResources": {"cpu": cpu},
                    "resources": {"requests": {"cpu": cpu}},
                }
            ],
        }
        return {**placed, "status": status}

    sched.on_pod_event("MODIFIED", with_status("1800m"))
    assert sched.state.accounted_cpu() == 1800
    waiting = raw_pod("waiting", cpu="1")
    async with running(sched):
        sched.on_pod_event("ADDED", waiting)
        await until(lambda: sched.queue.counts()["unschedulable"] == 1)
        sched.on_pod_event("MODIFIED", with_status("500m"))  # resized down: room again
        await until(lambda: len(api.binds("waiting")) == 1)
    assert sched.state.accounted_cpu() == 1500


async def test_two_hand_overs_with_a_wake_up_at_the_first_leave_no_pod_stuck() -> None:
    """Issue 26 end to end, in the scheduler. With a pod parked, the queue waits with a deadline;
    on Python 3.11 `wait_for` then swallowed a cancellation that came with the wake-up, so the
    loop of a replica that lost the lease went on as a standby and bound the new pod. After the
    next election and loss, that pod was left reserved and in flight with no bind behind it, for
    good: the state bench/faults found. Now the loop stops, and the pod ends bound."""
    hold = asyncio.Event()
    api = Api(p=[hold, hold])  # its binds hang until the test lets them go
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1", cpu="2"))
    first = asyncio.create_task(sched.run())
    sched.on_pod_event("ADDED", raw_pod("big", cpu="4"))  # parked: pop() waits with a deadline
    await asyncio.sleep(0.05)
    raw = raw_pod("p", cpu="500m")
    sched.on_pod_event("ADDED", raw)
    await asyncio.sleep(0)  # the wake-up is on its way...
    first.cancel()  # ...as the lease is lost
    sched.abandon()
    await asyncio.sleep(0.05)
    assert first.done() and not api.binds("p")  # no loop of an ended term binds
    second = asyncio.create_task(sched.run())  # elected again
    await asyncio.sleep(0.05)
    second.cancel()  # and lost again
    sched.abandon()
    await asyncio.sleep(0.05)
    hold.set()
    async with running(sched):  # the term that lasts
        await until(lambda: bool(api.events("Scheduled")), timeout=3.0)
    assert sched.state.pods[uid(raw)].bind_landed and uid(raw) not in sched.queue
    for task in (first, second):
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 1.0)


# --- volumes: a bind waiting in PreBind gives its slot back -------------------------------------
async def test_a_pod_waiting_for_its_claim_frees_its_slot_and_binds_once_the_claim_is_bound() -> (
    None
):
    from ..framework.test_volumes import claim, local_pv, storage_class

    api = Api()
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1"))
    storage = sched.state.storage
    storage.on_class_event("ADDED", storage_class())
    pv = local_pv("pv-1", "n1")
    pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] = (
        "kubernetes.io/hostname"
    )
    storage.on_volume_event("ADDED", pv)
    storage.on_claim_event("ADDED", claim("data"))
    body = raw_pod("db", cpu="100m")
    body["metadata"]["namespace"] = "ns"
    body["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    async with running(sched):
        sched.on_pod_event("ADDED", body)
        await until(lambda: len(api.fake.requests("PATCH", "/persistentvolumes/pv-1")) == 1)
        # waiting without a slot: only the loop holds one, for its next pod
        await until(lambda: sched.inflight.slots._value == 63)
        assert not api.binds("db")
        bound_pv = local_pv("pv-1", "n1")
        bound_pv["metadata"]["resourceVersion"] = "9"
        bound_pv["spec"]["claimRef"] = {"namespace": "ns", "name": "data", "uid": "c-data"}
        storage.on_volume_event("MODIFIED", bound_pv)
        bound_claim = claim("data", volume="pv-1")
        bound_claim["metadata"]["resourceVersion"] = "10"
        storage.on_claim_event("MODIFIED", bound_claim)
        await until(lambda: len(api.binds("db")) == 1)
        await until(lambda: len(api.events("Scheduled")) == 1)
    assert sched.inflight.slots._value == 64  # given back once, not twice
