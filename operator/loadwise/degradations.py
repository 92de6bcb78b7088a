"""Degradations: what makes loadwise schedule worse than it should, visible four ways.

Each active degradation is a log line when it starts and ends, `loadwise_degraded{reason}`,
a Warning event (a Normal one on recovery) and the `loadwise.io/Degraded` condition; the
last two are written by the leader (see reporting/reporter.py), on the operator's Pod, or on
its Lease when it runs outside a pod. Readiness reports them too.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

from . import observability as obs

log = logging.getLogger(__name__)

# reason -> event reason
EVENT_REASONS = {
    "no_policy": "NoPolicy",
    "crd_missing": "CrdMissing",
    "api_unreachable": "ApiServerUnreachable",
    "metrics_source": "MetricsDegraded",
    "stale_reservations": "StaleReservations",
}


@dataclass(frozen=True)
class Degradation:
    reason: str  # e.g. "no_policy", "metrics_source/prometheus"
    message: str
    since: float  # wall clock

    @property
    def event_reason(self) -> str:
        return EVENT_REASONS.get(self.reason.split("/", 1)[0], "Degraded")


@dataclass(frozen=True)
class Notice:
    """An event to post: (type, reason, message)."""

    type: str
    reason: str
    message: str


class Degradations:
    def __init__(self) -> None:
        self.active: dict[str, Degradation] = {}
        self.notices: deque[Notice] = deque(maxlen=64)  # drained by the leader's reporter
        self.generation = 0  # bumped on every change: the condition is rewritten then

    def set(self, reason: str, message: str) -> bool:
        """Mark `reason` active; True if it just started."""
        current = self.active.get(reason)
        if current is not None:
            if current.message != message:
                self.active[reason] = Degradation(reason, message, current.since)
                self.generation += 1
            return False
        degradation = Degradation(reason, message, time.time())
        self.active[reason] = degradation
        self.generation += 1
        obs.DEGRADED.labels(reason).set(1)
        log.warning("degraded (%s): %s", reason, message)
        self.notices.append(Notice("Warning", degradation.event_reason, message))
        return True

    def clear(self, reason: str, message: str = "") -> bool:
        """Mark `reason` over; True if it was active. `message` says what happened."""
        current = self.active.pop(reason, None)
        if current is None:
            return False
        self.generation += 1
        obs.DEGRADED.labels(reason).set(0)
        text = message or f"recovered after {time.time() - current.since:.0f}s: {current.message}"
        log.warning("recovered (%s): %s", reason, text)
        self.notices.append(Notice("Normal", f"{current.event_reason}Resolved", text))
        return True

    def replay(self) -> None:
        """A new leader re-posts what is active (the old leader's events may not cover it)."""
        for degradation in self.active.values():
            self.notices.append(Notice("Warning", degradation.event_reason, degradation.message))
        self.generation += 1

    def summary(self) -> str:
        return "; ".join(f"{d.reason}: {d.message}" for d in self.active.values())
