"""A pod group's scheduling cycle: kube-scheduler's schedule_one_podgroup, load-aware.

When a member is popped, every queued member of its group is taken with it and the group is
decided at once (framework/plugins/gang_scheduling/placement.py): each member through the same
cycle as any pod, assumed (with its volumes) before the next is tried, so the load score, the
hot rule and spreading see the group as a whole. If the members already placed and those placed
now reach the minimum, every placed member is bound at once; otherwise nothing is kept: each
assumption and volume reservation is undone, every member waits for a cluster event as one, and
each is told why, with the group named.

Binding is not transactional in Kubernetes (nor in kube-scheduler): a member whose bind fails
releases only its own reservation and is tried again after its backoff, alone, with its placed
siblings counted toward the minimum; members already bound stay bound (see docs/gangs.md).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from typing import Any

from ... import observability as obs
from ...framework.context import Basis
from ...framework.cycle import Decision, Unschedulable
from ...framework.plugin import CycleState, NoPreemption
from ...framework.plugins.gang_scheduling.placement import (
    PodGroupDecision,
    member_order,
    place_pod_group,
    pod_group_steps,
)
from ...framework.plugins.gang_scheduling.preemption import PodGroupPreemption, preempt_pod_group
from ...framework.pod_groups import PodGroup, PodGroupKey
from ...framework.preemption import TERMINATING
from ...framework.profile import Profile
from ...framework.types import PodInfo
from ...usage.cache import NodeSample
from ..binding.binder import Binder
from ..binding.inflight import InFlight
from ..departures import Departures
from ..outcomes import Outcomes
from ..preemptor import Preemptor
from ..queue import SchedulingQueue
from ..state import ClusterState
from .cool_room import AUTO_LIMIT, NEAR_LIMIT, RETRY, FreedRoom, coming, warm
from .members import PodGroupMembers
from .status import PodGroupStatus

log = logging.getLogger(__name__)

FIGURES = re.compile(r"\d+(?:\.\d+)?")  # the figures of a message, for its gist
# (pod, basis, the siblings decided with it) -> the scheduling cycle's result
Decide = Callable[[PodInfo, Basis, Collection[str]], Decision | Unschedulable]
# (pod, decision, attempt started, what its Reserve plugins kept) -> its binding cycle
BindTask = Callable[[PodInfo, Decision, float, CycleState], Coroutine[Any, Any, None]]
# A member's Prepare points (Profile.prepare): None, or the error that fails its try
Prepare = Callable[[PodInfo], Awaitable[str | None]]


class PodGroupCycle:
    def __init__(
        self,
        *,
        pod_groups: PodGroupMembers,
        state: ClusterState,
        queue: SchedulingQueue,
        inflight: InFlight,
        profile: Profile,
        binder: Binder,
        outcomes: Outcomes,
        preemption: Preemptor,
        preempts: bool,
        decide: Decide,
        basis_for: Callable[[PodInfo], Basis],
        bind_task: BindTask,
        observe: Callable[[Decision, Mapping[str, NodeSample]], None],
        wait_timeout: float,
        departures: Departures | None = None,
    ) -> None:
        """`preempts`: DefaultPreemption is on. `observe`: the placement metrics of a
        decision that is kept. `wait_timeout`: how long members may wait for their group
        before they are told why. `departures`: told of pods leaving their nodes too."""
        self.pod_groups = pod_groups
        self.state = state
        self.queue = queue
        self.inflight = inflight
        self.profile = profile
        self.binder = binder
        self.outcomes = outcomes
        self.preemption = preemption
        self.preempts = preempts
        self.decide = decide
        self.basis_for = basis_for
        self.bind_task = bind_task
        self.observe = observe
        self.wait_timeout = wait_timeout
        self.status = PodGroupStatus(pod_groups, binder)
        self._evicting: dict[PodGroupKey, set[str]] = {}  # victims of each group's preemption
        self._hot_since: dict[PodGroupKey, float] = {}  # groups waiting for cool room: since when
        self.freed = FreedRoom(departures=departures)  # pods leaving (the watch tells it)
        self._decisions = {
            r: obs.POD_GROUP_DECISIONS.labels(r)
            for r in ("placed", "unschedulable", "hot_wait", "error")
        }

    async def tell_waiting_forever(self) -> None:
        """Beside the loop, while leading: members held past their group's timeout are told
        why they wait (and the conditions written for PodGroups now gone are forgotten)."""
        while True:
            await asyncio.sleep(min(5.0, self.wait_timeout / 2))
            self.status.forget_gone(self.pod_groups.groups)
            for gone in [
                k for k in (*self._evicting, *self._hot_since) if k not in self.pod_groups.groups
            ]:
                self._evicting.pop(gone, None)
                self._hot_since.pop(gone, None)
            obs.POD_GROUPS_WAITING.set(sum(1 for _ in self.pod_groups.waiting()))
            for members, why in self.pod_groups.overdue(time.monotonic(), self.wait_timeout):
                self.inflight.spawn_unslotted(self._tell(members, why))

    async def _tell(self, pods: list[PodInfo], message: str) -> None:
        for pod in pods:
            await self.outcomes.report(pod, message)

    def schedule(self, pod: PodInfo) -> bool:
        """The group of a popped member (Scheduler.schedule_popped's contract: True when the
        loop's bind slot was handed to a task)."""
        opened = self._open(pod)
        if isinstance(opened, bool):
            return opened
        group, members, started = opened
        decision, cycles, basis = self._decide(group, members)
        return self._close(group, members, started, decision, cycles, basis)

    async def schedule_prepared(self, pod: PodInfo, prepare: Prepare) -> bool:
        """`schedule`, for a group whose members need preparing (their devices): each member's
        Prepare is awaited just before it is tried, so it sees the members before it in flight."""
        opened = self._open(pod)
        if isinstance(opened, bool):
            return opened
        group, members, started = opened
        decision, cycles, basis = await self._decide_prepared(group, members, prepare)
        return self._close(group, members, started, decision, cycles, basis)

    def _open(self, pod: PodInfo) -> tuple[PodGroup, list[PodInfo], float] | bool:
        """The group and its members taken from the queue, or the schedule's answer when the
        group cannot be decided now."""
        pod_groups = self.pod_groups
        key = pod.group
        assert key is not None
        group = pod_groups.groups.get(key)
        if group is None or not pod_groups.ready(key):  # its PodGroup went, or members left
            self.queue.remove(pod.uid)
            pod_groups.hold(pod)
            return False
        taken = (self.queue.take(uid) for uid in pod_groups.pending.get(key, {}) if uid != pod.uid)
        members = [pod, *(m for m in taken if m is not None and m.uid not in self.state.pods)]
        started = time.perf_counter()
        refusal = pod_groups.mismatch(group, members)
        if refusal:  # kube-scheduler fails such a group as a SchedulerError
            self._decisions["error"].inc()
            for member in members:
                self.queue.backoff(member.uid)
            self._report(group, members, {}, refusal, "SchedulerError")
            return True
        gap = pod_groups.resource_gap(group)
        if gap:  # coscheduling's PreFilter: unresolvable, no preemption
            self._decisions["unschedulable"].inc()
            for member in members:
                self.queue.park(member.uid)
            self._report(group, members, {}, gap, "Unschedulable")
            return True
        return group, members, started

    def _close(
        self,
        group: PodGroup,
        members: list[PodInfo],
        started: float,
        decision: PodGroupDecision,
        cycles: dict[str, CycleState],
        basis: Basis,
    ) -> bool:
        key = group.key
        done = time.perf_counter()
        obs.ALGORITHM_SECONDS.observe(done - started)
        waits = self._hot_wait(group, decision, basis) if decision.reached else ""
        if decision.reached and not waits:
            self._decisions["placed"].inc()
            for _, result in decision.placed:
                self.observe(result, basis.samples)
            self._bind(group, decision, cycles, started)
            return True
        for member, result in decision.placed:  # nothing of it is kept: Unreserve, forget
            self.profile.unreserve(cycles[member.uid], member, result.node)
            self.state.forget(member.uid)
            member.node_name, member.assumed = "", False  # pending again, as it was
        if waits:  # tried again soon: cool room may come with any sample or departure
            self._decisions["hot_wait"].inc()
            for member in members:
                self.queue.retry_after(member.uid, RETRY)
            # its figures (the rate rooms free at, what is finishing) change by the second:
            # told again only when more than those changed, not at every try
            return self._report(group, members, {}, waits, "Unschedulable", FIGURES.sub("#", waits))
        self._decisions["unschedulable"].inc()
        self.outcomes.unschedulable(len(members), done - started)
        for member in members:
            self.queue.park(member.uid)
        own = {p.uid: f"{result.message}; " for p, result in decision.refused}
        message = f"{decision.message} (pod group {key})"
        outcome = self._post_filter(group, members, basis) if self.preempts else None
        if isinstance(outcome, NoPreemption):
            message = f"{message} preemption: {outcome.message}"
        elif isinstance(outcome, PodGroupPreemption):
            cleared = [
                other
                for member in members
                if member.uid in outcome.nodes
                for other in self.preemption.nominate(member, outcome.nodes[member.uid])
            ]
            self._evicting[group.key] = {v.uid for v in outcome.victims}
            self.inflight.spawn(self._preempt(group, members, outcome, message, cleared))
            return True
        return self._report(group, members, own, message, "Unschedulable")

    def _hot_wait(self, group: PodGroup, decision: PodGroupDecision, basis: Basis) -> str:
        """Why the group waits for cool room, or "". gangHotWaitSeconds N: up to N s;
        unset: while cool room is coming (cool_room.py), up to AUTO_LIMIT s for a member on a
        hot node, NEAR_LIMIT s for one only nearly so; 0: never."""
        setting = basis.policy.spec.gang_hot_wait_seconds
        hot = [member for member, result in decision.placed if result.all_hot]
        near: list[PodInfo] = []
        siblings = {member.uid for member, _ in decision.placed}
        if setting is None:  # also nearly hot: where an estimate short or a swing tips it over
            near = [
                m for m, result in decision.placed
                if not result.all_hot and warm(result, self.state, basis)
            ]  # fmt: skip
            limit = AUTO_LIMIT if hot else NEAR_LIMIT
        else:
            limit = float(setting)
        if not limit or not (hot or near):
            self._hot_since.pop(group.key, None)
            return ""
        now = time.monotonic()
        waited = now - self._hot_since.setdefault(group.key, now)
        why = f"gangHotWaitSeconds {setting}"
        if setting is None:
            signs = coming([*hot, *near], self.state, basis, siblings, self.freed, limit - waited)
            if signs is None:
                self._hot_since.pop(group.key, None)
                return ""  # no cool room is coming in time: placed as it fits
            why = f"cool room is coming: {signs}"
        if waited >= limit:
            self._hot_since.pop(group.key, None)
            return ""  # waited long enough: placed as it fits
        what = f"{len(hot)} member(s) would land on a hot node" if hot else ""
        if near:
            what += f"{', ' if what else ''}{len(near)} on a nearly hot one"
        return (
            f"pod group {group.key} waits up to {limit:.0f}s for cool room "
            f"(policy {basis.policy.name}, {why}): {what}"
        )

    def _post_filter(
        self, group: PodGroup, members: list[PodInfo], basis: Basis
    ) -> PodGroupPreemption | NoPreemption | None:
        """Preemption for the group (framework/plugins/gang_scheduling/preemption.py); None:
        nothing to try. Not again while victims of its last preemption are still there
        (kube-scheduler's rule for a pod whose victims are terminating): their room is on its
        way."""
        obs.PREEMPTION_ATTEMPTS.inc()
        evicting = self._evicting.get(group.key)
        if evicting is not None:
            if any(uid in self.state.pods for uid in evicting):
                return NoPreemption(TERMINATING)
            del self._evicting[group.key]
        groups = self.pod_groups.groups

        def together(key: PodGroupKey) -> bool:
            found = groups.get(key)
            return found is not None and found.disrupt_all

        return preempt_pod_group(
            members,
            self.state,
            basis,
            group.minimum,
            self.state.pod_group_members[group.key],
            list(self.preemption.budgets.values()),
            together,
            self.profile,
        )

    async def _preempt(
        self,
        group: PodGroup,
        members: list[PodInfo],
        outcome: PodGroupPreemption,
        message: str,
        cleared: list[PodInfo],
    ) -> None:
        """The victims marked and deleted (each as kube-scheduler's PreemptPod), the nominations
        this ended cleared; every member told, nominated to its node; the group waits until the
        victims' deletion moves it."""
        binder, first = self.binder, min(members, key=member_order)
        victims = [v for v in outcome.victims if not v.deleting]
        obs.PREEMPTION_VICTIMS.observe(len(outcome.victims))
        names = ", ".join(v.key for v in outcome.victims)
        log.info("preempting %d pod(s) for pod group %s: %s", len(victims), group.key, names)
        try:
            await asyncio.gather(
                *(binder.preempt_victim(v, first, v.node_name) for v in victims),
                *(binder.clear_nomination(other) for other in cleared),
            )
            for member in members:
                await binder.event(member, "Warning", "FailedScheduling", message)
                node = outcome.nodes.get(member.uid)
                await binder.mark_unschedulable(member, message, nominated_node=node)
            await binder.event(
                first,
                "Normal",
                "Preempting",
                f"Preempting {len(outcome.victims)} pod(s) to make room for pod group "
                f"{group.key}: {names}",
            )
            await self.status.write(group, False, "Unschedulable", message)
        except Exception:  # best effort, as the binder's writes: the loop goes on
            log.exception("preemption for pod group %s failed", group.key)

    def _decide(
        self, group: PodGroup, members: list[PodInfo]
    ) -> tuple[PodGroupDecision, dict[str, CycleState], Basis]:
        """Members in kube-scheduler's order, each reserved (the Reserve plugins) and assumed
        when it fits; the group's policy is its first member's."""
        attempt, cycles, basis = self._attempts(members)
        scheduled = self.state.pod_group_members[group.key]  # before this cycle assumes any
        return place_pod_group(members, group.minimum, attempt, scheduled), cycles, basis

    async def _decide_prepared(
        self, group: PodGroup, members: list[PodInfo], prepare: Prepare
    ) -> tuple[PodGroupDecision, dict[str, CycleState], Basis]:
        """`_decide`, awaiting each member's preparation before it is tried (a failed one
        fails that member's try with its error)."""
        attempt, cycles, basis = self._attempts(members)
        scheduled = self.state.pod_group_members[group.key]
        steps = pod_group_steps(members, group.minimum, scheduled)
        try:
            member = next(steps)
            while True:
                error = await prepare(member)
                result = attempt(member) if error is None else Unschedulable(error, {})
                member = steps.send(result)
        except StopIteration as done:
            decision: PodGroupDecision = done.value
            return decision, cycles, basis

    def _attempts(
        self, members: list[PodInfo]
    ) -> tuple[Callable[[PodInfo], Decision | Unschedulable], dict[str, CycleState], Basis]:
        first = min(members, key=member_order)
        basis = self.basis_for(first)
        cycles: dict[str, CycleState] = {}
        siblings = {m.uid for m in members}

        def attempt(member: PodInfo) -> Decision | Unschedulable:
            result = self.decide(member, basis, siblings)
            if isinstance(result, Decision):
                cycle = CycleState()
                error = self.profile.reserve(cycle, member, result.node)
                if error is not None:  # each Reserve plugin was unreserved
                    return Unschedulable(error, {})
                cycles[member.uid] = cycle
                self.state.assume(member, result.node)
            return result

        return attempt, cycles, basis

    def _bind(
        self,
        group: PodGroup,
        decision: PodGroupDecision,
        cycles: dict[str, CycleState],
        started: float,
    ) -> None:
        for index, (member, result) in enumerate(decision.placed):
            cycle = cycles[member.uid]
            bind = self.bind_task(member, result, started, cycle)
            allowance = self.profile.bind_allowance(cycle)
            self.inflight.start_bind(member.uid, bind, allowance, slot=index == 0)
        for member, refused in decision.refused:  # the group is placed; this one waits
            self.queue.park(member.uid)
            message = f"{refused.message} (pod group {group.key} is placed without it)"
            if self.outcomes.should_report(member.uid, message):
                self.inflight.spawn_unslotted(self.outcomes.report(member, message))
        self.inflight.spawn_unslotted(self.status.write(group, True, "Scheduled", ""))

    def _report(
        self,
        group: PodGroup,
        members: list[PodInfo],
        own: dict[str, str],
        message: str,
        reason: str,
        gist: str | None = None,
    ) -> bool:
        """One task (it holds the loop's slot: True) tells every member, and the PodGroup.
        `gist`: what the message says but for figures that change from try to try; a member is
        told again (the group's status too) only when it changed, or after
        failure_event_interval. False: nobody to tell, the caller keeps its slot."""
        told = [
            (m, f"{own.get(m.uid, '')}{message}")
            for m in members
            if self.outcomes.should_report(m.uid, f"{own.get(m.uid, '')}{gist or message}")
        ]
        if gist is not None and not told:
            return False  # every member was told this within the interval, the group too

        async def report() -> None:
            for member, text in told:
                await self.outcomes.report(member, text)
            await self.status.write(group, False, reason, message)

        self.inflight.spawn(report())
        return True
