"""The binding cycle of a reserved pod: kube-scheduler's bindingCycle (PreBind, Bind, and what
follows). It runs in a task that owns the pod's reservation (inflight.py); whatever it learns
(bound, gone, taken, failed) settles the reservation and the queue entry, and a failed PreBind
is undone (Unreserve) and told."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .. import observability as obs
from ..framework.cycle import Decision
from ..framework.plugin import CycleState
from ..framework.types import PodInfo
from .binder import BindResult
from .decisions import decision_record

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger(__name__)


class BindingCycle:
    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler
        self._bind_seconds = {
            s: obs.EXTENSION_POINT_SECONDS.labels("Bind", s, scheduler.name)
            for s in ("Success", "Error")
        }

    async def run(
        self,
        pod: PodInfo,
        decision: Decision,
        attempt_started: float,
        sequence: int,
        cycle: CycleState,
    ) -> None:
        """`attempt_started`: perf_counter at the start of the pod's cycle (the attempt's
        duration is cycle plus bind, as kube-scheduler's). `cycle`: what the Reserve plugins
        left for PreBind, and for Unreserve if the pod is not bound."""
        bound = False
        try:
            bound = await self._cycle(pod, decision, attempt_started, sequence, cycle)
        finally:
            if not bound:
                self.s.profile.unreserve(cycle, pod, decision.node)

    async def _cycle(
        self,
        pod: PodInfo,
        decision: Decision,
        attempt_started: float,
        sequence: int,
        cycle: CycleState,
    ) -> bool:
        """PreBind, Bind and what follows; True when the pod was bound."""
        started = time.perf_counter()
        if self.s.profile.prebinders:
            error = await self.s.profile.prebind(
                cycle, pod, decision.node, self.s.inflight.free_slot
            )
            if error is not None:
                await self._prebind_failed(pod, decision, attempt_started, error)
                return False
        try:
            result = await self.s.binder.bind(pod, decision.node)
        except Exception:  # Binder.bind classifies errors itself; this is the backstop
            log.exception("bind of %s raised", pod.key, extra={"pod": pod.key})
            result = BindResult.ERROR
        if not self.s.inflight.settle(pod.uid):
            # Abandoned while the request ran on (leadership lost, reservation expired):
            # the reservation was released then, and the watch shows what the request did.
            log.info(
                "bind of %s to %s answered %s after it was abandoned",
                pod.key,
                decision.node,
                result.value,
                extra={"pod": pod.key, "node": decision.node},
            )
            return False
        finished = time.perf_counter()
        status = "Success" if result is BindResult.BOUND else "Error"
        self._bind_seconds[status].observe(finished - started)
        if result is BindResult.BOUND:
            pod.bind_landed = True  # a relist that no longer shows it may now drop it
            entry = self.s.queue.done(pod.uid)
            self.s.reported.pop(pod.uid, None)
            self.s.attempts["scheduled"].inc()
            self.s.attempt_seconds["scheduled"].observe(finished - attempt_started)
            if entry is not None:
                attempts = entry.attempts + 1  # the failed ones and this one
                obs.SLI_SECONDS.labels(str(attempts)).observe(
                    max(0.0, self.s.queue.clock() - entry.queued_at)
                )
                obs.POD_ATTEMPTS.observe(attempts)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "bound %s to %s: %s",
                    pod.key,
                    decision.node,
                    decision_record(decision),
                    extra={"pod": pod.key, "node": decision.node, "policy": decision.policy},
                )
            # The decision's number in this replica's order: binds and event writes run
            # concurrently, so the events' own order is not the order of the decisions.
            message = (
                f"Successfully assigned {pod.key} to {decision.node} (decision {sequence}); "
                f"{decision_record(decision)}"
            )
            self.s.events.emit(pod, "Normal", "Scheduled", message)
        elif result in (BindResult.GONE, BindResult.CONFLICT):
            # Deleted, or bound by someone else: the watch brings the truth. Still a failed
            # attempt, counted as kube-scheduler counts a failed bind: result "error".
            self.s.attempts["error"].inc()
            self.s.attempt_seconds["error"].observe(finished - attempt_started)
            self.s.state.forget(pod.uid)
            self.s.queue.done(pod.uid)
        else:
            self.s.attempts["error"].inc()
            self.s.attempt_seconds["error"].observe(finished - attempt_started)
            self.s.state.forget(pod.uid)
            self.s.queue.backoff(pod.uid)
        return result is BindResult.BOUND

    async def _prebind_failed(
        self, pod: PodInfo, decision: Decision, attempt_started: float, error: str
    ) -> None:
        """kube-scheduler's handleBindingCycleError after PreBind: unreserve (the caller's
        `finally`), forget the pod, retry it after backoff, and say why."""
        if not self.s.inflight.settle(pod.uid):
            return  # abandoned meanwhile: the reservation was released then
        log.warning(
            "PreBind of %s on %s failed: %s",
            pod.key,
            decision.node,
            error,
            extra={"pod": pod.key, "node": decision.node},
        )
        self.s.attempts["error"].inc()
        self.s.attempt_seconds["error"].observe(time.perf_counter() - attempt_started)
        self.s.state.forget(pod.uid)
        self.s.queue.backoff(pod.uid)
        self.s.reported[pod.uid] = (error, 0.0)
        await self.s.report_unschedulable(pod, self.s.reported[pod.uid][0])
