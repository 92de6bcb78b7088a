"""SchedulingGates (PreEnqueue): a pod with `spec.schedulingGates` waits outside the queue until
its last gate is removed; the update that removes it asks again. Its nomination still holds room
(the nominator records gated pods, as kube-scheduler's does). Made per scheduler: it keeps the
pods it holds, so it is not one of the shared DEFAULT_PLUGINS."""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from ..plugin import PreEnqueuePlugin
from ..types import PodInfo


class SchedulingGates(PreEnqueuePlugin):
    name: ClassVar[str] = "SchedulingGates"

    def __init__(self) -> None:
        self._gated: set[str] = set()

    def pre_enqueue(self, pod: PodInfo) -> bool:
        if pod.gated:
            self._gated.add(pod.uid)
            return False
        self._gated.discard(pod.uid)
        return True

    def forget(self, uid: str) -> None:
        self._gated.discard(uid)

    def known(self) -> Collection[str]:
        return self._gated

    def holding(self) -> int:
        return len(self._gated)

    def why_held(self, uid: str) -> str | None:
        # kube-scheduler's PodScheduled message for reason SchedulingGated
        return (
            "Scheduling is blocked due to non-empty scheduling gates"
            if uid in self._gated
            else None
        )
