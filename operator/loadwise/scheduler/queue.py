"""SchedulingQueue: kube-scheduler's three queues in one object.

- active: ready to schedule, ordered by priority (higher first), then creation time;
- backoff: failed recently; each attempt doubles the wait from `initial_backoff` to `max_backoff`;
- unschedulable: fit nowhere; parked until a cluster event could make them fit
  (`move_all_to_active`) or until `unschedulable_timeout` passes, so nothing waits forever.

Entries are keyed by pod UID; stale heap items are skipped lazily by sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from .. import observability as obs
from ..framework.profile import DEFAULT_PROFILE, Profile
from ..framework.types import PodInfo

Where = Literal["active", "backoff", "unschedulable", "in_flight"]
WHERE: tuple[Where, ...] = ("active", "backoff", "unschedulable", "in_flight")


@dataclass(slots=True)
class QueuedPod:
    pod: PodInfo
    where: Where
    seq: int
    attempts: int = 0
    failures: int = 0  # attempts that found no room: they set the backoff
    backoff_until: float = 0.0
    parked_at: float = 0.0
    queued_at: float = 0.0  # when it entered the queue: the scheduling SLI starts here


class SchedulingQueue:
    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        unschedulable_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        profile: Profile = DEFAULT_PROFILE,
        on_count: Callable[[Where, int], None] = obs.pending_changed,
    ) -> None:
        """`on_count`: told each count that changes, as it changes (the pending-pods gauge)."""
        self.profile = profile
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.unschedulable_timeout = unschedulable_timeout
        self.clock = clock
        self._entries: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, float, int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._parked: list[tuple[float, int, str]] = []  # (parked_at, seq, uid)
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._parked_waiting_for_pods = 0
        self._counts: dict[Where, int] = dict.fromkeys(WHERE, 0)
        self.on_count = on_count
        for where in WHERE:
            on_count(where, 0)

    # --- membership --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: str) -> bool:
        return uid in self._entries

    def uids(self) -> list[str]:
        return list(self._entries)

    def counts(self) -> dict[Where, int]:
        return dict(self._counts)

    def add(self, pod: PodInfo) -> None:
        """A pending pod appeared or changed. New pods go active; a parked pod whose spec, labels,
        requests or tolerations changed is retried (it may fit now); otherwise just refresh it."""
        entry = self._entries.get(pod.uid)
        if entry is None:
            self._entries[pod.uid] = entry = QueuedPod(pod, "active", 0, queued_at=self.clock())
            self._count("active", 1)
            self._push_active(entry)
            return
        changed = self.profile.pod_changed(entry.pod, pod)  # what some plugin reads
        where = entry.where
        self._set_where(entry, "in_flight")  # detach from the counters while the pod changes
        entry.pod = pod
        self._set_where(entry, where)
        if changed and entry.where == "unschedulable":
            self._push_active(entry)

    def refresh(self, pod: PodInfo) -> None:
        """Newer data for a pod already queued (e.g. in flight), without requeueing it."""
        entry = self._entries.get(pod.uid)
        if entry is not None and entry.where == "in_flight":
            entry.pod = pod

    def remove(self, uid: str) -> QueuedPod | None:
        """The pod was bound, deleted, or is no longer ours. Returns its entry, if queued."""
        entry = self._entries.pop(uid, None)
        if entry is not None:
            self._set_where(entry, "in_flight")
            self._count("in_flight", -1)
            self._compact()
        return entry

    done = remove

    def _compact(self) -> None:
        """Drop heap items whose pods are gone or have moved on. They are skipped when popped,
        but a standby never pops: without this its heaps grew with every pod ever queued."""
        limit = 2 * len(self._entries) + 1024
        if len(self._active) > limit:
            self._active = [i for i in self._active if self._current(i[2], i[3])]
            heapq.heapify(self._active)
        for heap in (self._backoff, self._parked):
            if len(heap) > limit:
                heap[:] = [i for i in heap if self._current(i[1], i[2])]
                heapq.heapify(heap)

    def _current(self, seq: int, uid: str) -> bool:
        entry = self._entries.get(uid)
        return entry is not None and entry.seq == seq

    def in_flight(self) -> list[str]:
        return [uid for uid, entry in self._entries.items() if entry.where == "in_flight"]

    def take(self, uid: str) -> PodInfo | None:
        """A queued pod taken out of turn (a member of the group being tried): in flight now,
        wherever it waited; None if it is not queued, or in flight already."""
        entry = self._entries.get(uid)
        if entry is None or entry.where == "in_flight":
            return None
        self._set_where(entry, "in_flight")
        entry.seq = next(self._seq)  # its heap items go stale: skipped later
        return entry.pod

    def retry_now(self, uid: str) -> None:
        """Back to active without counting an attempt (the attempt was abandoned, not failed)."""
        entry = self._entries.get(uid)
        if entry is not None:
            self._push_active(entry)

    # --- outcomes of an attempt --------------------------------------------------------------
    def backoff(self, uid: str) -> None:
        """A transient failure (the bind errored): retry after this pod's backoff."""
        entry = self._entries.get(uid)
        if entry is None:
            return
        self._count_attempt(entry)
        self._push_backoff(entry)

    def retry_after(self, uid: str, delay: float) -> None:
        """Tried again in `delay` seconds, whatever its attempts (a gang waiting for cool room:
        it is not failing, and the room it waits for comes with samples and departures). Its
        failures start over: it found room, so when it next finds none its backoff is short
        (counted on, a group that had waited for cool room a while backed off the longest,
        10 s, each time it then found no room)."""
        entry = self._entries.get(uid)
        if entry is None:
            return
        entry.attempts += 1
        entry.failures = 0
        entry.backoff_until = self.clock() + delay
        self._push_backoff(entry)

    def park(self, uid: str) -> None:
        """No node fits: wait for a cluster event (or the timeout)."""
        entry = self._entries.get(uid)
        if entry is None:
            return
        self._count_attempt(entry)
        self._set_where(entry, "unschedulable")
        entry.parked_at = self.clock()
        entry.seq = next(self._seq)
        heapq.heappush(self._parked, (entry.parked_at, entry.seq, uid))

    @property
    def waiting_for_pods(self) -> int:
        """Parked pods whose fit depends on other pods (affinity, spread)."""
        return self._parked_waiting_for_pods

    def move_all_to_active(self, only_waiting_for_pods: bool = False) -> int:
        """A cluster event could make parked pods fit: those still backing off wait out their
        backoff, the rest go active now. Returns how many moved. With `only_waiting_for_pods`
        (a pod was placed), only pods with affinity or spread constraints move."""
        if only_waiting_for_pods and not self._parked_waiting_for_pods:
            return 0
        moved = 0
        now = self.clock()
        if only_waiting_for_pods:
            for _, seq, uid in self._parked:
                entry = self._entries.get(uid)
                if (
                    entry is not None
                    and entry.seq == seq
                    and entry.where == "unschedulable"
                    and self.profile.waits_for_pods(entry.pod)
                ):
                    self._requeue(entry, now)  # its heap item goes stale: skipped later
                    moved += 1
            return moved
        for entry in self._pop_due(self._parked, float("inf"), "unschedulable"):
            self._requeue(entry, now)
            moved += 1
        return moved

    # --- consumption -------------------------------------------------------------------------
    async def pop(self) -> PodInfo:
        """The next pod to schedule; waits while none is ready."""
        while True:
            pod = self.pop_nowait()
            if pod is not None:
                return pod
            self._wake.clear()  # no await since pop_nowait: nothing was added in between
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
            # that arrives just as the wake-up does, so a loop cancelled on losing leadership
            # went on scheduling.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_deadline(self.clock())):
                    await self._wake.wait()

    def pop_nowait(self) -> PodInfo | None:
        """The next ready pod without waiting (lets the loop drain a batch between yields)."""
        now = self.clock()
        self._flush(now)
        while self._active:
            *_, seq, uid = heapq.heappop(self._active)
            entry = self._entries.get(uid)
            if entry is not None and entry.seq == seq and entry.where == "active":
                self._set_where(entry, "in_flight")
                return entry.pod
        return None

    # --- internals ---------------------------------------------------------------------------
    def _set_where(self, entry: QueuedPod, where: Where) -> None:
        if self.profile.waits_for_pods(entry.pod):
            self._parked_waiting_for_pods += (where == "unschedulable") - (
                entry.where == "unschedulable"
            )
        if where != entry.where:
            self._count(entry.where, -1)
            self._count(where, 1)
        entry.where = where

    def _count(self, where: Where, delta: int) -> None:
        self._counts[where] += delta
        self.on_count(where, self._counts[where])

    def _count_attempt(self, entry: QueuedPod) -> None:
        entry.attempts += 1
        entry.failures += 1
        delay = min(self.initial_backoff * 2 ** (entry.failures - 1), self.max_backoff)
        entry.backoff_until = self.clock() + delay

    def _requeue(self, entry: QueuedPod, now: float) -> None:
        if entry.backoff_until > now:
            self._push_backoff(entry)
        else:
            self._push_active(entry)

    def _push_active(self, entry: QueuedPod) -> None:
        self._set_where(entry, "active")
        entry.seq = next(self._seq)
        heapq.heappush(
            self._active, (-entry.pod.priority, entry.pod.created, entry.seq, entry.pod.uid)
        )
        self._wake.set()

    def _push_backoff(self, entry: QueuedPod) -> None:
        self._set_where(entry, "backoff")
        entry.seq = next(self._seq)
        heapq.heappush(self._backoff, (entry.backoff_until, entry.seq, entry.pod.uid))
        self._wake.set()

    def _flush(self, now: float) -> None:
        for entry in self._pop_due(self._backoff, now, "backoff"):
            self._push_active(entry)
        cutoff = now - self.unschedulable_timeout
        for entry in self._pop_due(self._parked, cutoff, "unschedulable"):
            self._requeue(entry, now)

    def _pop_due(
        self, heap: list[tuple[float, int, str]], until: float, where: Where
    ) -> Iterator[QueuedPod]:
        """Entries whose heap key is <= `until`, skipping items made stale by a later push."""
        while heap and heap[0][0] <= until:
            _, seq, uid = heapq.heappop(heap)
            entry = self._entries.get(uid)
            if entry is not None and entry.seq == seq and entry.where == where:
                yield entry

    def _next_deadline(self, now: float) -> float | None:
        deadlines = [self._backoff[0][0] - now] if self._backoff else []
        if self._parked:  # may be a stale item: waking early is harmless
            deadlines.append(self._parked[0][0] + self.unschedulable_timeout - now)
        return max(0.0, min(deadlines)) if deadlines else None
