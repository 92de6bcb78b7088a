"""The binding cycle of a reserved pod: kube-scheduler's bindingCycle (PreBind, Bind, and what
follows). It runs in a task that owns the pod's reservation (inflight.py); whatever it learns
(bound, gone, taken, failed) settles the reservation and the queue entry (../outcomes.py), and a
pod that is not bound is unreserved (the profile's Unreserve) and, after a failed PreBind,
told why."""

from __future__ import annotations

import logging
import time

from ... import observability as obs
from ...framework.cycle import Decision
from ...framework.plugin import CycleState
from ...framework.profile import Profile
from ...framework.types import PodInfo
from ..decisions import decision_record
from ..outcomes import Outcomes
from .binder import Binder, BindResult
from .events import EventWriter
from .inflight import InFlight

log = logging.getLogger(__name__)


class BindingCycle:
    def __init__(
        self,
        scheduler_name: str,
        profile: Profile,
        binder: Binder,
        inflight: InFlight,
        events: EventWriter,
        outcomes: Outcomes,
    ) -> None:
        self.profile = profile
        self.binder = binder
        self.inflight = inflight
        self.events = events
        self.outcomes = outcomes
        self._bind_seconds = {
            s: obs.EXTENSION_POINT_SECONDS.labels("Bind", s, scheduler_name)
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
                self.profile.unreserve(cycle, pod, decision.node)

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
        if self.profile.prebinders:
            error = await self.profile.prebind(cycle, pod, decision.node, self.inflight.free_slot)
            if error is not None:
                await self._prebind_failed(pod, decision, attempt_started, error)
                return False
        try:
            result = await self.binder.bind(pod, decision.node)
        except Exception:  # Binder.bind classifies errors itself; this is the backstop
            log.exception("bind of %s raised", pod.key, extra={"pod": pod.key})
            result = BindResult.ERROR
        if not self.inflight.settle(pod.uid):
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
        if result is not BindResult.BOUND:
            # Deleted, or bound by someone else: the watch brings the truth; otherwise tried
            # again after backoff. A failed attempt either way, counted as kube-scheduler
            # counts a failed bind: result "error".
            retry = result not in (BindResult.GONE, BindResult.CONFLICT)
            self.outcomes.failed(pod, finished - attempt_started, retry)
            return False
        pod.bind_landed = True  # a relist that no longer shows it may now drop it
        self.outcomes.bound(pod, finished - attempt_started)
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
        message = "; ".join(
            (
                f"Successfully assigned {pod.key} to {decision.node} (decision {sequence})",
                decision_record(decision),
                *self.profile.describe_reserved(cycle),
            )
        )
        self.events.emit(pod, "Normal", "Scheduled", message)
        return True

    async def _prebind_failed(
        self, pod: PodInfo, decision: Decision, attempt_started: float, error: str
    ) -> None:
        """kube-scheduler's handleBindingCycleError after PreBind: unreserve (the caller's
        `finally`), forget the pod, retry it after backoff, and say why."""
        if not self.inflight.settle(pod.uid):
            return  # abandoned meanwhile: the reservation was released then
        log.warning(
            "PreBind of %s on %s failed: %s",
            pod.key,
            decision.node,
            error,
            extra={"pod": pod.key, "node": decision.node},
        )
        self.outcomes.failed(pod, time.perf_counter() - attempt_started)
        self.outcomes.noted(pod.uid, error, again=True)
        await self.outcomes.report(pod, error)
