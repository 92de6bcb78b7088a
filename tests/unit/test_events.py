"""EventWriter: events never wait on each other's writes; a full buffer drops and counts."""

from __future__ import annotations

import asyncio

from loadwise.events import EventWriter, Write
from loadwise.framework.types import PodInfo

from ..helpers import pod_info


def gated(written: list[str], gate: asyncio.Event) -> Write:
    """A write that waits for the gate, then records the message."""

    async def write(pod: PodInfo, kind: str, reason: str, message: str) -> None:
        await gate.wait()
        written.append(message)

    return write


async def test_events_are_written_after_emit_returns_and_flush_waits_for_them() -> None:
    written: list[str] = []
    gate = asyncio.Event()
    writer = EventWriter(gated(written, gate), capacity=10, workers=2)
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
    writer = EventWriter(gated(written, gate), capacity=3, workers=1)
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

    async def write(pod: PodInfo, kind: str, reason: str, message: str) -> None:
        if message == "bad":
            raise RuntimeError("boom")
        written.append(message)

    writer = EventWriter(write, capacity=10, workers=1)
    writer.emit(pod_info("a"), "Normal", "Scheduled", "bad")
    writer.emit(pod_info("b"), "Normal", "Scheduled", "good")
    await writer.flush()
    assert written == ["good"]
    await writer.stop()
