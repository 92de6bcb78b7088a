"""Outcomes: what becomes of a pod's attempt, in one place for the scheduler, the pod group
cycle and the binding cycle: kube-scheduler's attempt metrics, its failure handler for errors
(forget the assumption, then back off or drop the queue entry; parking a pod no node took is the
caller's, beside preemption) and the FailedScheduling report with its de-duplication (the same
message is told again only after `failure_event_interval`)."""

from __future__ import annotations

import time

from .. import observability as obs
from ..framework.types import PodInfo
from .binding.binder import Binder
from .queue import SchedulingQueue
from .state import ClusterState

RESULTS = ("scheduled", "unschedulable", "error")


class Outcomes:
    def __init__(
        self,
        scheduler_name: str,
        state: ClusterState,
        queue: SchedulingQueue,
        binder: Binder,
        failure_event_interval: float,
    ) -> None:
        self.state = state
        self.queue = queue
        self.binder = binder
        self.failure_event_interval = failure_event_interval
        self.reported: dict[str, tuple[str, float]] = {}  # uid -> (message, monotonic time)
        # kube-scheduler's metrics; the profile label is the scheduler name.
        self._attempts = {r: obs.SCHEDULE_ATTEMPTS.labels(r, scheduler_name) for r in RESULTS}
        self._seconds = {r: obs.ATTEMPT_SECONDS.labels(r, scheduler_name) for r in RESULTS}

    def bound(self, pod: PodInfo, seconds: float) -> None:
        """The Binding landed: the queue entry goes, with the attempt counted and the time
        from first queued to bound (the SLI) observed."""
        entry = self.queue.done(pod.uid)
        self.reported.pop(pod.uid, None)
        self._attempts["scheduled"].inc()
        self._seconds["scheduled"].observe(seconds)
        if entry is not None:
            attempts = entry.attempts + 1  # the failed ones and this one
            obs.SLI_SECONDS.labels(str(attempts)).observe(
                max(0.0, self.queue.clock() - entry.queued_at)
            )
            obs.POD_ATTEMPTS.observe(attempts)

    def failed(self, pod: PodInfo, seconds: float | None, retry: bool = True) -> None:
        """An error (result "error"): what was assumed for the pod is forgotten, and it is
        retried after backoff, or (`retry` False: deleted, or bound by someone else) left to
        the watch. `seconds`: the attempt's duration, when it had one to observe."""
        self._attempts["error"].inc()
        if seconds is not None:
            self._seconds["error"].observe(seconds)
        self.state.forget(pod.uid)
        if retry:
            self.queue.backoff(pod.uid)
        else:
            self.queue.done(pod.uid)

    def unschedulable(self, pods: int, seconds: float) -> None:
        """Attempts no node took (a group's members counted one by one); the caller parks
        them, or hands them to preemption."""
        self._attempts["unschedulable"].inc(pods)
        for _ in range(pods):
            self._seconds["unschedulable"].observe(seconds)

    def should_report(self, uid: str, message: str) -> bool:
        """True, and noted, unless this message was told for the pod within the interval."""
        now = time.monotonic()
        last = self.reported.get(uid)
        if last is not None and last[0] == message and now - last[1] < self.failure_event_interval:
            return False
        self.reported[uid] = (message, now)
        return True

    def noted(self, uid: str, message: str, again: bool = False) -> None:
        """`message` is told for the pod by other means (preemption's own report); `again`:
        the next report of the same message is not held back."""
        self.reported[uid] = (message, 0.0 if again else time.monotonic())

    async def report(self, pod: PodInfo, message: str) -> None:
        """The FailedScheduling event and the PodScheduled=False condition (run in a task)."""
        await self.binder.event(pod, "Warning", "FailedScheduling", message)
        await self.binder.mark_unschedulable(pod, message)
