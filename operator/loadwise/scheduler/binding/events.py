"""EventWriter: Scheduled events are written after their binds, never in their way.

A bind slot is released as soon as the Binding lands; its event goes into a bounded buffer that
a few workers drain. Binds first: while half the bind slots or more wait for the API server
(`busy`: a burst), the workers hold their events back, unless the buffer is half full; a
burst's events are written as it ends, and an endless stream of binds still gets its events,
late. The API server is what binds and events share: with a core of its own beside the API
server's, loadwise's binds per second reached the raw binding ceiling this way (median of three
at 1000 nodes, 1.00 of it, against 0.88 when events were written during the burst;
bench/results/2026-11-27/README.md). When the buffer is full the event is dropped and counted
(`loadwise_events_dropped_total`), as client-go's event broadcaster drops under pressure: an
event is a report, the Binding is the decision.

A write the API server may accept later (unreachable, 5xx, 429) is tried again, the worker
backing off, up to TRIES times (client-go's broadcaster: 12 tries 10 s apart), and then
dropped and counted. Without this, an API server restart just after a burst, with the burst's
events still held, lost them all (4977 of 5000, `bench/throughput --relist` at 15,000 nodes) and
logged a warning for each; now the workers wait it out, a few warnings per try. An event is
built, and so named, once: every try posts the same body, so a try the API server took but
whose answer was lost (a network black hole) makes the next one answer 409 AlreadyExists,
which is the event written, never a second one (as client-go's broadcaster).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ... import observability as obs
from ...framework.types import PodInfo

log = logging.getLogger(__name__)

# (pod, type, reason, message) -> the event's body, named: built once per event
Build = Callable[[PodInfo, str, str, str], dict[str, Any]]
# body -> False if not written but a retry (of the same body) may write it
Write = Callable[[dict[str, Any]], Awaitable[bool]]


HOLD_POLL = 0.05  # seconds between a held event's looks at whether binds are still waiting
TRIES = 12
RETRY_FLOOR, RETRY_CAP = 0.5, 10.0  # seconds between tries: doubling, up to the cap


def never_busy() -> bool:
    return False


class EventWriter:
    def __init__(
        self,
        build: Build,
        write: Write,
        capacity: int = 10_000,
        workers: int = 4,
        busy: Callable[[], bool] = never_busy,
    ) -> None:
        self._build = build
        self._write = write
        self._queue: asyncio.Queue[tuple[PodInfo, str, str, str]] = asyncio.Queue(capacity)
        self._capacity = capacity
        self._busy = busy
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0

    def emit(self, pod: PodInfo, event_type: str, reason: str, message: str) -> None:
        if not self._tasks:
            self.start()
        try:
            self._queue.put_nowait((pod, event_type, reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            obs.EVENTS_DROPPED.inc()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work()) for _ in range(self._workers)]

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            # Binds first. Polled: `busy` is the binder's state, and a look every 50 ms costs
            # nothing beside a bind.
            while self._busy() and self._queue.qsize() < self._capacity // 2:  # noqa: ASYNC110
                await asyncio.sleep(HOLD_POLL)
            try:
                await self._write_with_retries(item)
            finally:
                self._queue.task_done()

    async def _write_with_retries(self, item: tuple[PodInfo, str, str, str]) -> None:
        delay = RETRY_FLOOR
        try:
            body = self._build(*item)
        except Exception:  # best effort: a report lost, never the writer
            log.exception("building a %s event failed", item[2])
            return
        for attempt in range(1, TRIES + 1):
            try:
                if await self._write(body):
                    return
            except Exception:
                log.exception("writing a %s event failed", item[2])
                return
            if attempt < TRIES:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)
        log.warning("a %s event for %s dropped after %d tries", item[2], item[0].key, TRIES)
        self.dropped += 1
        obs.EVENTS_DROPPED.inc()

    async def flush(self) -> None:
        """Until every buffered event is written (shutdown, tests)."""
        if self._tasks:
            await self._queue.join()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
