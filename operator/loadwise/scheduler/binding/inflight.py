"""InFlight: what the scheduling loop hands off, and the reservations behind it.

The loop holds a bind slot while it schedules a pod; a cycle that starts a task (a bind, a
preemption, a failure report) hands the slot to it, and the slot comes back when the task ends,
however it ends (a task cancelled before its first step never runs its own `finally`). A bind
task owns its pod's reservation (kube-scheduler's binding cycle after Reserve): when it ends
without settling the pod, the reservation is released and the pod queued again; an answer from
an attempt abandoned meanwhile changes nothing. The audit enforces the invariant that every
reservation is, within a bound, seen bound or still being tried.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Coroutine
from typing import Any

from ... import observability as obs
from ..queue import SchedulingQueue
from ..state import ClusterState

log = logging.getLogger(__name__)


class InFlight:
    def __init__(self, state: ClusterState, queue: SchedulingQueue, concurrency: int) -> None:
        self.state = state
        self.queue = queue
        self.concurrency = concurrency
        self.slots = asyncio.Semaphore(concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self._freed: set[asyncio.Task[None]] = set()  # tasks that gave their slot back early
        self._binds: dict[str, asyncio.Task[None]] = {}  # pod uid -> the bind that owns it
        # seconds a bind may take beyond the audit's bound (volume binding waits for claims)
        self._allowance: dict[str, float] = {}

    def crowded(self) -> bool:
        """Whether half the bind slots or more hold binds waiting for their answers: a burst,
        which the EventWriter lets go first. Not one bind left hanging (a claim's PreBind, a
        request into a black hole), which must not hold every event back."""
        return len(self._binds) >= max(1, self.concurrency // 2)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task that holds the slot its caller was given."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_ended)
        return task

    def spawn_unslotted(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task beside the one its caller's slot went to (a group's reports and status)."""
        task = self.spawn(coro)
        self._freed.add(task)
        return task

    def start_bind(
        self,
        uid: str,
        coro: Coroutine[Any, Any, None],
        allowance: float = 0.0,
        slot: bool = True,
    ) -> None:
        """A bind task for a reserved pod, owning its reservation; `allowance`: how much
        longer than other binds it may take (PreBind waiting for claims to be bound); `slot`:
        False for a group's members past the first, which bind at once on the one slot the
        loop held for the group (as kube-scheduler starts a binding goroutine for each)."""
        task = self.spawn(coro) if slot else self.spawn_unslotted(coro)
        self._binds[uid] = task
        if allowance:
            self._allowance[uid] = allowance
        else:
            self._allowance.pop(uid, None)
        task.add_done_callback(functools.partial(self._bind_ended, uid))

    def settle(self, uid: str) -> bool:
        """Called by a bind task with its answer: True if it still owns the pod (and now
        settles it), False if it was abandoned meanwhile (leadership lost, reservation
        expired): the reservation was released then, and the watch shows what it did."""
        if self._binds.get(uid) is not asyncio.current_task():
            return False
        del self._binds[uid]
        self._allowance.pop(uid, None)
        return True

    def free_slot(self) -> None:
        """The running task gives its slot back before it ends: it waits on others now (a
        bind's PreBind waiting for its claims to be bound, as kube-scheduler's binding
        goroutines do, unbounded), so the loop may go on meanwhile."""
        task = asyncio.current_task()
        if task in self.tasks and task not in self._freed:
            self._freed.add(task)
            self.slots.release()

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if task in self._freed:
            self._freed.discard(task)
        else:
            self.slots.release()

    def _bind_ended(self, uid: str, task: asyncio.Task[None]) -> None:
        """A bind task ended without settling its pod (cancelled, even before it started, or
        crashed): release its reservation and retry the pod."""
        if self._binds.get(uid) is task:
            del self._binds[uid]
            self._allowance.pop(uid, None)
            self.release(uid)

    def release(self, uid: str) -> None:
        """Unreserve a pod whose bind did not land and put it back in the queue (an attempt
        abandoned, not failed: no backoff). A pod whose bind landed is only taken off the
        queue: the watch brings it."""
        pod = self.state.pods.get(uid)
        if pod is not None and pod.bind_landed:
            self.queue.done(uid)
            return
        self.state.forget(uid)
        if uid in self.queue:
            self.queue.retry_now(uid)
        elif pod is not None and pod.assumed:  # its queue entry is gone: queue it again
            self.queue.add(dataclasses.replace(pod, node_name="", assumed=False))

    def abandon(self) -> None:
        """Stop every task at once and release what binds that did not land reserved; then
        whatever is still reserved has no bind behind it (the audit's invariant, enforced at
        every hand-over). Synchronous: nothing new is sent after it returns."""
        for task in list(self.tasks):
            task.cancel()
        binds, self._binds = self._binds, {}
        self._allowance.clear()
        for uid in [*binds, *self.queue.in_flight()]:
            self.release(uid)
        self.audit(bound=0.0)

    def audit(self, bound: float) -> int:
        """The reservation invariant: a pod reserved on a node is, within `bound` seconds
        (the bind timeout plus the longest backoff), seen bound, or its bind is still being
        tried; otherwise its reservation is released and it is queued again. A reservation
        with no bind behind it at all is released at once. Returns how many were released."""
        now = time.monotonic()
        released = 0
        for uid, since in list(self.state.assumed.items()):
            pod = self.state.pods.get(uid)
            if pod is None or pod.bind_landed:
                continue  # our bind landed: the watch will show it (a deletion drops it)
            task = self._binds.get(uid)
            if task is not None and now - since <= bound + self._allowance.get(uid, 0.0):
                continue
            log.error(
                "reservation of %s on %s released: %s",
                pod.key,
                pod.node_name,
                f"its bind has not answered in {now - since:.0f}s"
                if task is not None
                else "no bind is in flight for it",
                extra={"pod": pod.key, "node": pod.node_name},
            )
            if task is not None:
                del self._binds[uid]
                self._allowance.pop(uid, None)
                task.cancel()
            self.release(uid)
            released += 1
        if released:
            obs.RESERVATIONS_RELEASED.inc(released)
        obs.STALE_RESERVATIONS.set(released)
        return released

    def oldest(self) -> float:
        """Age in seconds of the oldest reservation whose bind has not landed (0 if none),
        less the allowance of binds that wait for volumes."""
        now = time.monotonic()
        ages = [
            now - since - self._allowance.get(uid, 0.0)
            for uid, since in self.state.assumed.items()
            if (pod := self.state.pods.get(uid)) is not None and not pod.bind_landed
        ]
        return max(ages, default=0.0)

    async def drain(self) -> None:
        """Wait for every task (used at shutdown and by tests)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
