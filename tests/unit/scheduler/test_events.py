"""EventWriter: events never wait on each other's writes; a full buffer drops and counts; binds
first while a burst crowds the bind slots; what the API server may take later is tried again."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from loadwise.framework.types import PodInfo
from loadwise.scheduler.binding import events
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.binding.events import EventWriter, Write
from loadwise.scheduler.binding.inflight import InFlight
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.state import ClusterState

from ...fakes import FakeTransport, Reply
from ...helpers import pod_info


def as_body(pod: PodInfo, kind: str, reason: str, message: str) -> dict[str, Any]:
    return {"message": message}


def writer_of(binder: Binder) -> EventWriter:
    return EventWriter(binder.pod_event, binder.post_event, capacity=10, workers=1)


def gated(written: list[str], gate: asyncio.Event) -> Write:
    """A write that waits for the gate, then records the message."""

    async def write(body: dict[str, Any]) -> bool:
        message = body["message"]
        await gate.wait()
        written.append(message)
        return True

    return write


async def test_events_are_written_after_emit_returns_and_flush_waits_for_them() -> None:
    written: list[str] = []
    gate = asyncio.Event()
    writer = EventWriter(as_body, gated(written, gate), capacity=10, workers=2)
    for i in range(5):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
    assert written == []  # emit never waits for the API
    gate.set()
    await writer.flush()
    assert sorted(written) == [f"m{i}" for i in range(5)]
    await writer.stop()


async def test_a_full_buffer_drops_new_events_and_counts_them() -> None:
    gate = asyncio.Event()
    written: list[str] = []
    writer = EventWriter(as_body, gated(written, gate), capacity=3, workers=1)
    for i in range(6):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
        await asyncio.sleep(0)  # the worker takes the first one off the buffer
    gate.set()
    await writer.flush()
    assert writer.dropped == 2
    assert written == ["m0", "m1", "m2", "m3"]
    await writer.stop()


async def test_a_failing_write_does_not_stop_the_writer() -> None:
    written: list[str] = []

    async def write(body: dict[str, Any]) -> bool:
        message = body["message"]
        if message == "bad":
            raise RuntimeError("boom")
        written.append(message)
        return True

    writer = EventWriter(as_body, write, capacity=10, workers=1)
    writer.emit(pod_info("a"), "Normal", "Scheduled", "bad")
    writer.emit(pod_info("b"), "Normal", "Scheduled", "good")
    await writer.flush()
    assert written == ["good"]
    await writer.stop()


async def test_drops_are_counted_in_the_metric() -> None:
    gate = asyncio.Event()
    writer = EventWriter(as_body, gated([], gate), capacity=1, workers=1)
    before = REGISTRY.get_sample_value("loadwise_events_dropped_total") or 0.0
    for i in range(4):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
    # The worker has not run yet: one event buffered, three dropped.
    assert REGISTRY.get_sample_value("loadwise_events_dropped_total") == before + 3
    gate.set()
    await writer.flush()
    await writer.stop()


def replying(answers: list[Reply | BaseException]) -> FakeTransport:
    """The API: `answers` in turn, then 201 Created."""

    def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        return 201, {}

    return FakeTransport(api)


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "RETRY_FLOOR", 0.001)
    monkeypatch.setattr(events, "RETRY_CAP", 0.002)


def posted(fake: FakeTransport) -> list[str]:
    return [(c.body or {})["message"] for c in fake.requests("POST", "/events")]


@pytest.mark.usefixtures("quick_retries")
async def test_an_event_the_api_server_may_take_later_is_tried_again_not_lost() -> None:
    fake = replying(
        [
            aiohttp.ClientConnectionError("reset"),
            TimeoutError(),
            (503, b"shutting down"),
            (429, b"too many requests"),
        ]
    )
    writer = writer_of(Binder(fake, "loadwise-scheduler"))
    for i in range(3):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
    await asyncio.wait_for(writer.flush(), 2.0)
    assert posted(fake) == ["m0"] * 5 + ["m1", "m2"]  # four failures, then written; in order
    assert writer.dropped == 0
    await writer.stop()


@pytest.mark.usefixtures("quick_retries")
async def test_a_refused_event_is_not_retried_and_a_lasting_outage_drops_after_tries() -> None:
    before = REGISTRY.get_sample_value("loadwise_events_dropped_total") or 0.0
    outage: list[Reply | BaseException] = [(503, b"down")] * events.TRIES
    fake = replying([(422, b"invalid"), *outage])
    writer = writer_of(Binder(fake, "loadwise-scheduler"))
    for i in range(3):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
    await asyncio.wait_for(writer.flush(), 2.0)
    # m0 refused once (a retry cannot fix it); m1 tried TRIES times and dropped; m2 written.
    assert posted(fake) == ["m0", *["m1"] * events.TRIES, "m2"]
    assert writer.dropped == 1
    assert REGISTRY.get_sample_value("loadwise_events_dropped_total") == before + 1
    await writer.stop()


async def test_events_wait_while_binds_wait_and_go_when_they_are_answered() -> None:
    written: list[str] = []
    binding = True

    async def write(body: dict[str, Any]) -> bool:
        message = body["message"]
        written.append(message)
        return True

    writer = EventWriter(as_body, write, capacity=10, workers=2, busy=lambda: binding)
    for i in range(3):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
    await asyncio.sleep(0.12)  # a few of the writers' looks
    assert written == []  # binds first
    binding = False
    await asyncio.wait_for(writer.flush(), 2.0)
    assert sorted(written) == ["m0", "m1", "m2"]
    await writer.stop()


async def test_a_half_full_buffer_is_written_even_while_binds_wait() -> None:
    written: list[str] = []

    async def write(body: dict[str, Any]) -> bool:
        message = body["message"]
        written.append(message)
        return True

    writer = EventWriter(as_body, write, capacity=8, workers=1, busy=lambda: True)
    for i in range(6):
        writer.emit(pod_info(f"p{i}"), "Normal", "Scheduled", f"m{i}")
    await asyncio.sleep(0.2)
    # The worker holds one; it writes while 4 or more wait behind it, so none is dropped.
    assert writer.dropped == 0
    assert written[:2] == ["m0", "m1"] and len(written) == 2
    await writer.stop()


async def test_a_burst_of_binds_crowds_the_slots_and_one_hanging_bind_does_not() -> None:
    inflight = InFlight(ClusterState(), SchedulingQueue(), concurrency=4)
    hang = asyncio.Event()
    assert not inflight.crowded()
    inflight.start_bind("a", hang.wait())
    assert not inflight.crowded()  # one bind left hanging holds no event back
    inflight.start_bind("b", hang.wait())
    assert inflight.crowded()  # half the slots: a burst, binds first
    hang.set()
    await asyncio.sleep(0.01)
    assert not inflight.crowded()


def events_api(lose_first_answers: int) -> tuple[FakeTransport, dict[str, dict[str, Any]]]:
    """An API server that keeps events by name (409 AlreadyExists for a name it has) and whose
    first `lose_first_answers` answers are lost on the way back, after it acted."""
    stored: dict[str, dict[str, Any]] = {}
    lost = [lose_first_answers]

    def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        assert body is not None
        name = body["metadata"]["name"]
        answer: Reply = (409, {"kind": "Status", "reason": "AlreadyExists"})
        if name not in stored:
            stored[name] = dict(body)
            answer = (201, body)
        if lost[0]:
            lost[0] -= 1
            raise aiohttp.ClientConnectionError("answer lost in a black hole")
        return answer

    return FakeTransport(api), stored


@pytest.mark.usefixtures("quick_retries")
async def test_an_accepted_event_whose_answer_was_lost_is_not_written_twice() -> None:
    before = REGISTRY.get_sample_value("loadwise_events_dropped_total") or 0.0
    fake, stored = events_api(lose_first_answers=2)
    writer = writer_of(Binder(fake, "loadwise-scheduler"))
    writer.emit(pod_info("p0"), "Normal", "Scheduled", "m0")
    await asyncio.wait_for(writer.flush(), 2.0)
    assert len(fake.requests("POST", "/events")) == 3  # two answers lost, the last 409
    assert [e["message"] for e in stored.values()] == ["m0"]  # one name for all three tries
    assert writer.dropped == 0  # AlreadyExists is written, not dropped
    assert REGISTRY.get_sample_value("loadwise_events_dropped_total") == before
    await writer.stop()
