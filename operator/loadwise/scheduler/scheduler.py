"""Scheduler: kube-scheduler's schedule-one over the queue and the cluster state.

Watch events reach the state and queue through `event_handlers.ClusterEvents` (the informers
call its methods, which the scheduler exposes). `run()` is the loop, on the leader only: pop a
pod, run the scheduling cycle (the score index over the framework's plugins) against in-memory
state, Reserve (assume) the chosen node, and hand the binding cycle to a bounded set of
concurrent tasks that own its slot (binding/inflight.py); a pod that fits nowhere goes to PostFilter
(preemption, preemptor.py) and the failure handler (park, report). The cycle never awaits the
network: its writes (bindings, events, PodScheduled, nominations and evictions) run in tasks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import random
import time
from collections.abc import Collection, Coroutine, Mapping, Sequence
from typing import Any

from .. import observability as obs
from ..config import SchedulingSettings
from ..framework.context import Basis
from ..framework.cycle import Decision, Nominated, Unschedulable, schedule_one
from ..framework.index import ScoreIndex
from ..framework.plugin import CycleState, NoPreemption, Plugin, Preemption
from ..framework.profile import DEFAULT_PROFILE, Profile
from ..framework.scoring import score_node, weighted_load
from ..framework.types import PodInfo
from ..policies.policy import Policy
from ..policies.policy_set import PolicySet
from ..usage.cache import MetricsCache
from .binding.binder import Binder
from .binding.cycle import BindingCycle
from .binding.events import EventWriter
from .binding.inflight import InFlight
from .decisions import DecisionMetrics
from .device_classes import DeviceClasses
from .dynamic_resources.device_load import DeviceLoad
from .dynamic_resources.helper import AllocatorProcess
from .dynamic_resources.objects import DeviceObjects
from .event_handlers import ClusterEvents
from .outcomes import Outcomes
from .plugins import SCHEDULER_PLUGINS, Factory, Handle
from .pod_groups.cycle import PodGroupCycle
from .pod_groups.members import PodGroupMembers
from .preemptor import Preemptor
from .queue import SchedulingQueue
from .rebalancing.moves import Moves
from .state import ClusterState
from .usage_sources import UsageSources

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        scheduler_name: str,
        binder: Binder,
        caches: Mapping[str, MetricsCache],
        queue: SchedulingQueue,
        settings: SchedulingSettings | None = None,
        rng: random.Random | None = None,
        state: ClusterState | None = None,
        profile: Profile = DEFAULT_PROFILE,
        plugins: Sequence[Factory] = SCHEDULER_PLUGINS,
    ) -> None:
        """`settings`: binding, retries, preemption (the queue has its own). `profile` gets the
        scheduler's own plugins, which keep pods or write (`_extended`)."""
        self.settings = settings = settings or SchedulingSettings()
        self.name, self.binder, self.queue = scheduler_name, binder, queue
        if state is None:
            state = ClusterState(profile.placed_changed, queue.move_all_to_active)
        self.state = state
        self.usage = UsageSources(caches, state)
        self.policies = PolicySet(on_change=self._policies_changed)
        self.rng = rng or random.Random()
        self._term, self._decided = 0, itertools.count(1)  # see abandon(); decisions made
        self._decision_metrics = DecisionMetrics()
        self.inflight = InFlight(state, queue, settings.bind_concurrency)
        self.events = EventWriter(binder.pod_event, binder.post_event, busy=self.inflight.crowded)
        self.outcomes = Outcomes(
            scheduler_name, state, queue, binder, settings.failure_event_interval
        )
        self.devices = DeviceObjects(state.claims, queue.move_all_to_active)
        self.allocator = AllocatorProcess(self.devices.snapshot)  # started on first use
        # DeviceClasses: the allocator's, and which extended resources they back
        self.device_classes = DeviceClasses(state.dra_backed, self.devices)
        self.pod_groups = PodGroupMembers(
            scheduler_name, state, queue.add, queue.move_all_to_active
        )
        self.preemption = Preemptor(state, binder, profile, self.rng, self.pod_groups.whole_groups)
        self.moves = Moves(state, self.preemption.nominated)
        self.profile = self._extended(profile, plugins)
        # The dry runs judge nodes by every filter the cycle runs (DynamicResources' too)
        self.preemption.profile = self.profile
        self.index = ScoreIndex(self.profile)
        self._wire_cycles()
        obs.PENDING.labels("gated").set_function(self.profile.holding)

    def _extended(self, profile: Profile, plugins: Sequence[Factory]) -> Profile:
        """`profile` and this scheduler's own plugins: `plugins` made with what they may use,
        then GangScheduling and (when on) DefaultPreemption."""
        handle = Handle(
            self.binder.transport,
            self.state,
            self.settings,
            self.queue.add,
            self.devices,
            self.allocator,
            DeviceLoad(
                [c.source for c in self.usage.caches.values()],
                min((c.interval for c in self.usage.caches.values()), default=15.0),
            ),
        )
        made = [make(handle) for make in plugins]
        ours = [p for m in made for p in ((m,) if isinstance(m, Plugin) else m)]
        ours.append(self.pod_groups)
        if self.settings.preemption:
            ours.append(self.preemption)
        return profile.with_plugins(ours)

    @property
    def preempts(self) -> bool:
        """DefaultPreemption: on (kube-scheduler's default) or off."""
        return self.settings.preemption

    def _wire_cycles(self) -> None:
        """The pod group cycle, the binding cycle and the watch handlers, given what they use."""
        self.pod_group_cycle = PodGroupCycle(
            pod_groups=self.pod_groups,
            state=self.state,
            queue=self.queue,
            inflight=self.inflight,
            profile=self.profile,
            binder=self.binder,
            outcomes=self.outcomes,
            preemption=self.preemption,
            preempts=self.preempts,
            decide=self.decide,
            basis_for=self.basis_for,
            bind_task=self.bind_task,
            observe=self._decision_metrics.observe,
            wait_timeout=self.settings.gang_wait_timeout,
            departures=self.usage.departures,
        )
        self.binding = BindingCycle(
            self.name, self.profile, self.binder, self.inflight, self.events, self.outcomes
        )
        self.watch = ClusterEvents(  # watch events in: the informers call its methods
            self.name, self.state, self.queue, self.profile, self.preemption,
            self.outcomes.reported, self.pod_groups.foreign_pod, self.pod_group_cycle.freed,
        )  # fmt: skip

    # --- watch events in (event_handlers.py) --------------------------------------------------
    def on_node_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.watch.on_node_event(event_type, raw)

    def on_namespace_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.watch.on_namespace_event(event_type, raw)

    def on_pod_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.watch.on_pod_event(event_type, raw)

    def relisted_pods(self, uids: set[str]) -> int:
        return self.watch.relisted_pods(uids)

    def relisted_nodes(self, names: set[str]) -> int:
        return self.watch.relisted_nodes(names)

    def relisted_namespaces(self, names: set[str]) -> None:
        self.watch.relisted_namespaces(names)

    def _policies_changed(self) -> None:
        """A policy was applied or removed: the sources resize their history, and waiting
        pods are tried again under what is now in force."""
        self.usage.keep_history(self.policies.policies())
        self.queue.move_all_to_active()

    # --- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        term = self._term
        log.info("scheduler %s running", self.name)
        waiting = asyncio.get_running_loop().create_task(
            self.pod_group_cycle.tell_waiting_forever()
        )
        try:
            while True:
                await self.inflight.slots.acquire()
                try:
                    pod = await self.queue.pop()
                except BaseException:  # cancelled while waiting (leadership lost, shutdown)
                    self.inflight.slots.release()
                    raise
                if term != self._term:
                    # Leadership ended while this loop waited (a cancellation can be lost on
                    # the way in): the pod is not ours to place any more.
                    self.queue.retry_now(pod.uid)
                    self.inflight.slots.release()
                    return
                handed_off = False
                try:
                    if self.profile.preparers and pod.uid not in self.state.pods:
                        if self.pod_groups.applies(pod):  # each member prepared in turn
                            handed_off = await self.pod_group_cycle.schedule_prepared(
                                pod, self._prepare_member
                            )
                            continue
                        if not await self._prepared(pod):
                            continue  # the attempt failed: reported, backing off
                    handed_off = self.schedule_popped(pod)
                except Exception:  # a bug must cost one attempt, never the loop
                    log.exception(
                        "scheduling %s failed; retrying after backoff",
                        pod.key,
                        extra={"pod": pod.key},
                    )
                    self.outcomes.failed(pod, None)
                finally:
                    if not handed_off:
                        self.inflight.slots.release()
        finally:
            waiting.cancel()
            if term == self._term:  # stopped otherwise than by abandon(): end the term here
                self.abandon()

    def schedule_popped(self, pod: PodInfo) -> bool:
        """kube-scheduler's ScheduleOne for a popped pod: the scheduling cycle, then the binding
        cycle handed to a task, or PostFilter and the failure handler. The caller holds a bind
        slot: returns True when the slot was handed to a task it started (which releases it),
        False when the caller keeps it."""
        if pod.uid in self.state.pods:  # bound or assumed meanwhile
            self.queue.done(pod.uid)
            return False
        if self.pod_groups.applies(pod):  # a pod group's member: its whole group is decided now
            return self.pod_group_cycle.schedule(pod)
        started = time.perf_counter()
        basis = self.basis_for(pod)
        policy, samples = basis.policy, basis.samples
        result = self.decide(pod, basis)
        done = time.perf_counter()
        obs.ALGORITHM_SECONDS.observe(done - started)
        if isinstance(result, Decision):
            cycle = self._reserve(pod, result.node)
            if cycle is None:
                return True  # an error: the pod backs off, a task reports it
            self._decision_metrics.observe(result, samples)
            self.state.assume(pod, result.node)
            if pod.anti_affinity_terms or self.queue.waiting_for_pods:
                # Assumed pods count like placed ones (affinity, spread, anti-affinity).
                self.queue.move_all_to_active(only_waiting_for_pods=True)
            bind = self.bind_task(pod, result, started, cycle)
            self.inflight.start_bind(pod.uid, bind, self.profile.bind_allowance(cycle))
            return True
        held = self.preemption.held_for(pod) if self.preemption.nominated else {}
        self.outcomes.unschedulable(1, done - started)
        message = result.message
        outcome = (
            self.post_filter(pod, policy, held)
            if self.profile.post_filters and not pod.invalid_reason
            else None
        )
        if isinstance(outcome, NoPreemption):
            message = f"{message} preemption: {outcome.message}"
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s unschedulable: %s; policy %s",
                pod.key,
                message,
                policy.name,
                extra={"pod": pod.key, "policy": policy.name},
            )
        self.queue.park(pod.uid)
        if isinstance(outcome, Preemption):
            cleared = self.preemption.nominate(pod, outcome.node)
            self.inflight.spawn(self.preemption.carry_out(pod, outcome, message, cleared))
            self.outcomes.noted(pod.uid, message)
            return True
        if self.outcomes.should_report(pod.uid, message):
            self.inflight.spawn(self.outcomes.report(pod, message))
            return True
        return False

    async def _prepared(self, pod: PodInfo) -> bool:
        """The Prepare plugins the pod needs (the device allocator's verdicts), awaited before
        its cycle; False when one failed (the pod backs off and is told why)."""
        if pod.uid in self.state.pods or not self.profile.needs_prepare(pod):
            return True
        error = await self.profile.prepare(pod)
        if error is None:
            return True
        self.outcomes.failed(pod, None)
        self.inflight.spawn(self.outcomes.report(pod, error))
        return False

    async def _prepare_member(self, pod: PodInfo) -> str | None:
        return await self.profile.prepare(pod) if self.profile.needs_prepare(pod) else None

    def basis_for(self, pod: PodInfo) -> Basis:
        """What the pod's decision is judged against now: its policy, that policy's samples
        (as the pod's priority band sees them; a pod group's member, by peaks)."""
        namespace = self.state.namespaces.get(pod.namespace)
        policy = self.policies.for_pod(pod.labels, namespace, pod.scheduler_name)
        group = self.pod_groups.applies(pod)
        return self.usage.basis(policy, time.time(), self.rng, pod.priority, group)

    def decide(
        self, pod: PodInfo, basis: Basis, siblings: Collection[str] = ()
    ) -> Decision | Unschedulable:
        """The scheduling cycle for one pod (the pod group cycle's too, with the `siblings` it
        decides alongside): the score index, or the full cycle when room is being made for it
        somewhere."""
        reserved = self.moves.claim(pod, basis.now) if self.moves.records else None
        held = self.preemption.held_for(pod, siblings) if self.preemption.nominated else {}
        if held or pod.nominated_node or reserved:  # rare: room is being made somewhere
            nominated = Nominated(self.state, held)
            # a replacement of a pod rebalancing moved takes the room held for it if it fits
            ask = dataclasses.replace(pod, nominated_node=reserved) if reserved else pod
            return schedule_one(ask, self.state, basis, self.profile, nominated)
        return self.index.schedule(pod, self.state, basis)

    def _reserve(self, pod: PodInfo, node: str) -> CycleState | None:
        """The Reserve plugins; None when one failed (each was unreserved): the pod is retried
        after backoff, and told why, as kube-scheduler's cycle does."""
        cycle = CycleState()
        error = self.profile.reserve(cycle, pod, node)
        if error is None:
            return cycle
        self.outcomes.failed(pod, None)  # nothing was assumed yet
        self.inflight.spawn(self.outcomes.report(pod, error))
        return None

    # --- preemption --------------------------------------------------------------------------
    def post_filter(
        self, pod: PodInfo, policy: Policy, held: Mapping[str, list[PodInfo]]
    ) -> Preemption | NoPreemption | None:
        """The PostFilter plugins (DefaultPreemption, preemptor.py), ties between candidates
        going to the node with the least weighted load under the pod's policy."""
        state = self.state
        basis = self.usage.basis(policy, time.time(), self.rng, pod.priority)

        def load_of(name: str) -> float:
            return weighted_load(policy, score_node(pod, state.nodes[name], state, basis))

        return self.profile.post_filter(pod, held, load_of)

    def bind_task(
        self, pod: PodInfo, decision: Decision, attempt_started: float, cycle: CycleState
    ) -> Coroutine[Any, Any, None]:
        """The binding cycle of a reserved pod, numbered in the order of decisions."""
        return self.binding.run(pod, decision, attempt_started, next(self._decided), cycle)

    def abandon(self) -> None:
        """Leadership lost: end the term, stop every bind and report in flight at once. What
        was reserved for binds that did not land is released and their pods wait in the queue,
        so a later term (or the next leader, whose watch shows what did land) starts from the
        truth. Synchronous: nothing new is sent after it returns."""
        self._term += 1
        self.inflight.abandon()

    def audit_reservations(self, bound: float) -> int:
        """The reservation invariant (InFlight.audit); returns how many were released."""
        return self.inflight.audit(bound)

    def oldest_reservation(self) -> float:
        """Age in seconds of the oldest reservation whose bind has not landed (0 if none)."""
        return self.inflight.oldest()

    def trim_placements(self, keep: float) -> int:
        """Trim the state's placement log: a node's entries are needed only after the oldest
        coverage of its samples in any cache, and (for samples yet to come) the last `keep`
        seconds."""
        floor = time.time() - keep
        caches = list(self.usage.caches.values())

        def covered_until(node: str) -> float:
            coverages = [s.coverage for c in caches if (s := c.samples.get(node)) is not None]
            return min([floor, *coverages])

        return self.state.trim_placements(covered_until)

    def update_gauges(self) -> None:
        """The accounting gauges (the pending gauge follows the queue as it changes)."""
        obs.ACCOUNTED_PODS.set(len(self.state.pods))
        obs.ACCOUNTED_CPU.set(self.state.accounted_cpu())

    async def drain(self) -> None:
        """Wait for in-flight binds and reports (used at shutdown and by tests)."""
        await self.inflight.drain()
        await self.events.flush()

    async def close(self) -> None:
        """End what the scheduler started besides its tasks (the device allocator)."""
        await self.allocator.close()
