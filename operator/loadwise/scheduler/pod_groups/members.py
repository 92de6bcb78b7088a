"""Pod groups: the PodGroups of both APIs (framework/pod_groups.py), the pending pods of each,
and whether a group may be tried yet.

kube-scheduler's GangScheduling PreEnqueue (a PreEnqueuePlugin the scheduler adds to its
profile), as loadwise keeps it: a member is held back,
silently and without an attempt, until its PodGroup exists and at least its minimum of members
exist (pending, assumed or bound); then every held member of the group is queued at once. The
pending members of other schedulers are counted too: they make up the group as much as ours,
and a group that mixes schedulers is refused as kube-scheduler refuses it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from ... import observability as obs
from ...framework.plugin import Preemption, PreEnqueuePlugin
from ...framework.pod_groups import (
    COSCHEDULING,
    UPSTREAM,
    Api,
    PodGroup,
    PodGroupKey,
    parse_pod_group,
    pod_group_of,
)
from ...framework.types import PodInfo, is_terminal
from ..state import ClusterState

log = logging.getLogger(__name__)

UPSTREAM_PATH = "/apis/scheduling.k8s.io/v1beta1/podgroups"
COSCHEDULING_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"
PATHS: Mapping[Api, str] = {UPSTREAM: UPSTREAM_PATH, COSCHEDULING: COSCHEDULING_PATH}


class PodGroupMembers(PreEnqueuePlugin):
    name = "GangScheduling"

    def __init__(
        self,
        scheduler_name: str,
        state: ClusterState,
        release: Callable[[PodInfo], None],
        changed: Callable[[], object],
    ) -> None:
        """`release`: told of each held member its group made ready (it queues it);
        `changed`: told when a PodGroup changed, since its parked members may fit now (a
        smaller minimum)."""
        self.scheduler_name = scheduler_name
        self.state = state  # placed and assumed members are counted there (pod_group_members)
        self.groups: dict[PodGroupKey, PodGroup] = {}
        self.conditions: dict[PodGroupKey, list[dict[str, Any]]] = {}  # status as last seen
        self.phases: dict[PodGroupKey, str] = {}  # coscheduling's status.phase as last seen
        self.broken: dict[PodGroupKey, str] = {}  # PodGroups that cannot be read: why
        self.pending: dict[PodGroupKey, dict[str, PodInfo]] = {}  # our pending members
        self.held: dict[str, PodInfo] = {}  # members not queued until their group is ready
        self.held_at: dict[str, float] = {}  # uid -> monotonic time it was first held
        self.told: dict[PodGroupKey, float] = {}  # waiting groups told, and when
        self.foreign: dict[PodGroupKey, dict[str, str]] = {}  # others' pending: uid -> scheduler
        self._group_of: dict[str, PodGroupKey] = {}  # uid -> its group, for ours and others'
        self.release = release
        self.changed = changed
        self.apis: set[Api] = {UPSTREAM, COSCHEDULING}  # those served (runtime.py finds out)

    def applies(self, pod: PodInfo) -> bool:
        """Whether `pod` is placed with its group: it names one, of an API this cluster serves
        (kube-scheduler, too, places a pod whose group API it lacks as any other pod)."""
        return pod.group is not None and pod.group.api in self.apis

    def unwatch(self, api: Api) -> None:
        """`api` is not served (or not readable): its members are ordinary pods from now on."""
        self.apis.discard(api)
        for uid, pod in list(self.held.items()):
            if pod.group is not None and pod.group.api == api:
                self.forget(uid)
                self.release(pod)

    # --- PodGroups (informers) ---------------------------------------------------------------
    def on_event(self, api: Api) -> Callable[[str | None, Mapping[str, Any]], None]:
        def handle(event_type: str | None, raw: Mapping[str, Any]) -> None:
            meta = raw.get("metadata") or {}
            key = PodGroupKey(api, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if not key.name:
                return
            if event_type == "DELETED":
                self._drop(key)
                return
            try:
                group = parse_pod_group(api, raw)
            except ValueError as exc:
                if self.broken.get(key) != str(exc):
                    log.warning("PodGroup %s (%s) ignored: %s", key, api, exc)
                self._drop(key)
                self.broken[key] = str(exc)
                return
            self.broken.pop(key, None)
            status = raw.get("status") or {}
            conditions = status.get("conditions")
            self.conditions[key] = list(conditions) if isinstance(conditions, list) else []
            self.phases[key] = str(status.get("phase") or "")
            if self.groups.get(key) != group:
                self.changed()
            self.groups[key] = group
            self.try_release(key)

        return handle

    def relisted(self, api: Api) -> Callable[[set[str]], None]:
        """Forget this API's groups a fresh list no longer shows (keys: namespace/name)."""

        def handle(names: set[str]) -> None:
            for key in [k for k in [*self.groups, *self.broken] if k.api == api]:
                if str(key) not in names:
                    self._drop(key)

        return handle

    def _drop(self, key: PodGroupKey) -> None:
        self.groups.pop(key, None)
        self.conditions.pop(key, None)
        self.phases.pop(key, None)
        self.broken.pop(key, None)

    # --- members -----------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> bool:
        """A pending pod of ours appeared or changed: True when it may be queued now (not a
        member, or its group is ready), False when it is held until its group is ready (then
        it and its held siblings are released)."""
        key = pod.group
        if key is None or key.api not in self.apis:
            self.forget(pod.uid)  # not a member (any more)
            return True
        self._join(pod.uid, key)
        self.pending.setdefault(key, {})[pod.uid] = pod
        if self.ready(key):
            self.held.pop(pod.uid, None)
            self.held_at.pop(pod.uid, None)
            self.try_release(key)
            return True
        self._hold(pod)
        return False

    def hold(self, pod: PodInfo) -> None:
        """A member popped while its group is not ready (its PodGroup went, members left)."""
        if pod.group is not None and pod.uid in self.pending.get(pod.group, {}):
            self._hold(pod)

    def _hold(self, pod: PodInfo) -> None:
        self.held[pod.uid] = pod
        self.held_at.setdefault(pod.uid, time.monotonic())

    def foreign_pod(self, uid: str, raw: Mapping[str, Any]) -> None:
        """A pending pod another scheduler places: counted only as a member of its group."""
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        if not (spec.get("schedulingGroup") or meta.get("labels")):
            return
        key = pod_group_of(meta, spec)
        if key is None or meta.get("deletionTimestamp") or is_terminal(raw):
            self.forget(uid)
        else:
            self.note_foreign(uid, key, str(spec.get("schedulerName") or ""))

    def note_foreign(self, uid: str, key: PodGroupKey, scheduler_name: str) -> None:
        """A pending member another scheduler is named to place."""
        self._join(uid, key)
        self.foreign.setdefault(key, {})[uid] = scheduler_name
        self.try_release(key)

    def forget(self, uid: str) -> None:
        """Bound, deleted, or no longer a pending member."""
        key = self._group_of.pop(uid, None)
        if key is None:
            return
        self.held.pop(uid, None)
        self.held_at.pop(uid, None)
        for members in (self.pending, self.foreign):
            these = members.get(key)
            if these is not None:
                these.pop(uid, None)
                if not these:
                    del members[key]

    def known(self) -> Collection[str]:
        """Every pending member's uid, ours and others' (a relist drops those it lacks)."""
        return list(self._group_of)

    def holding(self) -> int:
        return len(self.held)

    def why_held(self, uid: str) -> str | None:
        pod = self.held.get(uid)
        return self.why_waiting(pod.group) if pod is not None and pod.group else None

    def _join(self, uid: str, key: PodGroupKey) -> None:
        if self._group_of.get(uid, key) != key:  # its label changed: it left its old group
            self.forget(uid)
        self._group_of[uid] = key

    # --- readiness ---------------------------------------------------------------------------
    def members(self, key: PodGroupKey) -> int:
        """Members that exist: pending (ours and others') and placed or assumed."""
        pending = sum(1 for uid in self.pending.get(key, ()) if uid not in self.state.pods)
        return pending + len(self.foreign.get(key, ())) + self.state.pod_group_members[key]

    def ready(self, key: PodGroupKey) -> bool:
        group = self.groups.get(key)
        return group is not None and self.members(key) >= group.minimum

    def try_release(self, key: PodGroupKey) -> None:
        if not self.ready(key):
            return
        self.told.pop(key, None)
        for uid in [u for u in self.pending.get(key, ()) if u in self.held]:
            self.held_at.pop(uid, None)
            self.release(self.held.pop(uid))

    def waiting(self) -> Iterator[tuple[PodGroupKey, int]]:
        """Groups with members held back, and how many."""
        counts: dict[PodGroupKey, int] = {}
        for pod in self.held.values():
            if pod.group is not None:
                counts[pod.group] = counts.get(pod.group, 0) + 1
        return iter(counts.items())

    def overdue(self, now: float, default: float) -> list[tuple[list[PodInfo], str]]:
        """Groups whose members have waited longer than the group's timeout (coscheduling's
        scheduleTimeoutSeconds, else `default`) since they were held or last told: the members
        to tell, and why they wait. Nothing of theirs is held meanwhile: waiting costs no room."""
        members: dict[PodGroupKey, list[PodInfo]] = {}
        for pod in self.held.values():
            if pod.group is not None:
                members.setdefault(pod.group, []).append(pod)
        for key in [k for k in self.told if k not in members]:
            del self.told[key]
        due = []
        for key, pods in members.items():
            group = self.groups.get(key)
            timeout = group.timeout if group is not None and group.timeout else default
            since = self.told.get(key) or min(self.held_at.get(p.uid, now) for p in pods)
            if now - since >= timeout:
                if key not in self.told:
                    obs.POD_GROUPS_TIMED_OUT.inc()
                self.told[key] = now
                due.append((pods, self.why_waiting(key)))
        return due

    def why_waiting(self, key: PodGroupKey) -> str:
        """What a held member waits for, in words."""
        group = self.groups.get(key)
        if group is None:
            broken = self.broken.get(key)
            if broken is not None:
                return f"pod group {key} cannot be read: {broken}"
            return f"pod group {key} does not exist: its members wait for it"
        return (
            "waiting for minCount pods from a gang to appear in scheduling queue: "
            f"{self.members(key)} of {group.minimum} exist (pod group {key})"
        )

    def whole_groups(self, preemption: Preemption) -> Preemption:
        """A victim in a group whose `disruptionMode` is `all` takes every placed pod of its
        group with it (they are evicted together, wherever they run)."""
        together = {
            v.group
            for v in preemption.victims
            if v.group is not None and (g := self.groups.get(v.group)) is not None and g.disrupt_all
        }
        if not together:
            return preemption
        chosen = {v.uid for v in preemption.victims}
        extra = [
            p
            for p in self.state.pods.values()
            if p.group in together and p.uid not in chosen and not p.deleting
        ]
        return dataclasses.replace(preemption, victims=(*preemption.victims, *extra))

    def resource_gap(self, group: PodGroup) -> str:
        """coscheduling's PreFilter check of `minResources` (and minMember pods): what the
        cluster's free room lacks, counting the group's own placed pods as free ("" if none)."""
        if not group.min_resources:
            return ""
        wanted = {**group.min_resources, "pods": group.minimum}
        for name, node in self.state.nodes.items():
            free = dict(node.allocatable)
            for resource, amount in self.state.requested(name).items():
                free[resource] = free.get(resource, 0) - amount
            for pod in self.state.pods_on(name):
                if pod.group == group.key:
                    for resource, amount in pod.requests.amounts.items():
                        free[resource] = free.get(resource, 0) + amount
                    free["pods"] = free.get("pods", 0) + 1
            for resource in list(wanted):
                wanted[resource] -= max(0, free.get(resource, 0))
                if wanted[resource] <= 0:
                    del wanted[resource]
            if not wanted:
                return ""
        gap = ", ".join(f"{r} {a}" for r, a in sorted(wanted.items()))
        return f"pod group {group.key}: the cluster's free room is short of minResources by {gap}"

    def mismatch(self, group: PodGroup, members: list[PodInfo]) -> str:
        """kube-scheduler's refusal of a group whose members disagree ("" when they agree)."""
        names = {n for n in self.foreign.get(group.key, {}).values() if n != self.scheduler_name}
        if names:
            return (
                "all pods in a single pod group should have the same .spec.schedulerName set, "
                f'got: "{sorted(names)[0]}" and "{self.scheduler_name}"'
            )
        if group.priority is not None:
            for pod in members:
                if pod.priority != group.priority:
                    return (
                        "all pods in a single pod group should have the same priority as the "
                        f"pod group's priority, got {pod.priority} and {group.priority}"
                    )
        return ""
