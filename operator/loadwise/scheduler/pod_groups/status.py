"""What a PodGroup's status says of loadwise's decisions on its group.

- Kubernetes' PodGroup: the condition `PodGroupInitiallyScheduled`, as kube-scheduler writes it:
  False (reason Unschedulable or SchedulerError, with the message) until the group is handed to
  binding, then True (reason Scheduled); once True, never written again.
- coscheduling's PodGroup: `status.phase`, which its own controller computes from the members'
  pod phases (Pending: "the scheduler can not allocate enough resources"; Scheduling; Running;
  Finished; Failed). loadwise writes only the two a scheduling decision tells: Pending when the
  group cannot be placed, Scheduling when it is handed to binding, and never over Running,
  Finished or Failed; the controller, where it runs, goes on from there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ...framework.pod_groups import UPSTREAM, PodGroup, PodGroupKey
from ...kube.times import stamp
from ..binding.binder import Binder
from .members import PodGroupMembers

log = logging.getLogger(__name__)
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
SETTLED_PHASES = ("Running", "Finished", "Failed")  # the controller's alone


class PodGroupStatus:
    def __init__(self, pod_groups: PodGroupMembers, binder: Binder) -> None:
        self.pod_groups = pod_groups
        self.binder = binder
        self._written: dict[PodGroupKey, tuple[str, str, str]] = {}  # group -> what was written

    def forget_gone(self, groups: Mapping[PodGroupKey, PodGroup]) -> None:
        for key in [k for k in self._written if k not in groups]:
            del self._written[key]

    async def write(self, group: PodGroup, placed: bool, reason: str, message: str) -> None:
        """Best effort: a status that cannot be written never fails scheduling."""
        if group.key.api == UPSTREAM:
            await self._condition(group, "True" if placed else "False", reason, message)
        else:
            await self._phase(group, "Scheduling" if placed else "Pending")

    async def _phase(self, group: PodGroup, phase: str) -> None:
        key = group.key
        current = self.pod_groups.phases.get(key, "")
        if (
            current == phase
            or current in SETTLED_PHASES
            or self._written.get(key) == (phase, "", "")
        ):
            return
        self._written[key] = (phase, "", "")
        path = (
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{key.namespace}/podgroups/"
            f"{key.name}/status"
        )
        if not await self.binder.patch_merge("PodGroup phase", path, {"status": {"phase": phase}}):
            self._written.pop(key, None)

    async def _condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        """PodGroupInitiallyScheduled, as kube-scheduler writes it: once True, never again."""
        key = group.key
        current = self.pod_groups.conditions.get(key, [])
        mine = next((c for c in current if c.get("type") == INITIALLY_SCHEDULED), None)
        if mine is not None and mine.get("status") == "True":
            return
        if self._written.get(key) == (status, reason, message):
            return
        self._written[key] = (status, reason, message)
        since = mine.get("lastTransitionTime") if mine and mine.get("status") == status else None
        condition = {
            "type": INITIALLY_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message[:1024],
            "lastTransitionTime": since or stamp(),
        }
        conditions = [c for c in current if c.get("type") != INITIALLY_SCHEDULED]
        path = (
            f"/apis/scheduling.k8s.io/v1beta1/namespaces/{key.namespace}/podgroups/"
            f"{key.name}/status"
        )
        body = {"status": {"conditions": [*conditions, condition]}}
        if not await self.binder.patch_merge("PodGroup status", path, body):
            self._written.pop(key, None)
        log.debug("PodGroup %s: %s=%s (%s)", key, INITIALLY_SCHEDULED, status, reason)
