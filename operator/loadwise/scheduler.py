"""Scheduler: the queue, the cluster state and the loop, fed by the Runtime's informers.

Watch events go in through `on_pod_event` / `on_node_event` / `on_namespace_event`
(synchronous, cheap; which changes matter comes from the plugins' declarations); `run()` is the
loop, on the leader only: pop a pod, run the pure cycle against in-memory state, Reserve
(assume) the chosen node, and hand the Binding to a bounded set of concurrent bind tasks. The
cycle never awaits the network; binds, events and PodScheduled are the only writes for pods.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from . import observability as obs
from .binder import Binder, BindResult
from .device_classes import DeviceClasses
from .events import EventWriter
from .framework.cycle import Decision, Nominated, Unschedulable, schedule_one
from .framework.disruption_budgets import DisruptionBudget, parse_budget
from .framework.index import ScoreIndex
from .framework.preemption import NoPreemption, Preemption, preempt
from .framework.profile import DEFAULT_PROFILE, Profile
from .framework.scoring import UsageProfiles, score_node, weighted_load
from .framework.types import (
    FROM_METADATA,
    PodInfo,
    is_terminal,
    parse_pod,
    preempted_by_scheduler,
    resize_key,
)
from .metrics.cache import MetricsCache, NodeSample
from .policy import Policy, PolicySet, parse_spec
from .queue import SchedulingQueue, Where
from .state import ClusterState
from .workload_selectors import namespaced_name

log = logging.getLogger(__name__)
RESULTS = ("scheduled", "unschedulable", "error")


def decision_record(decision: Decision) -> str:
    """The short why that goes into the Scheduled event."""
    chosen = decision.chosen
    load = _load(chosen.cpu, chosen.memory, chosen.sample_age)
    text = f"score {decision.score:.0f} ({load})"
    runner = decision.runner_up
    if runner is not None:
        text += f"; runner-up {runner[1].node} score {runner[0]:.0f}"
    if decision.hot_skipped:
        text += f"; {decision.hot_skipped} hot node(s) passed over"
    if decision.all_hot:
        text += "; every feasible node is hot: least loaded chosen"
    return f"{text}; policy {decision.policy}"


def _load(cpu: float, mem: float, age: float | None) -> str:
    where = f"metrics {age:.0f}s old" if age is not None else "requests"
    return f"cpu {cpu:.0%} mem {mem:.0%} by {where}"


class _PolicyMetrics:
    """One policy's labelled metrics, resolved once (a labels() lookup per pod adds up), and
    created at 0 so rate() and dashboards see the series before the first event."""

    __slots__ = ("all_hot", "by_metrics", "by_requests", "estimate", "hot")

    def __init__(self, policy: str) -> None:
        self.by_metrics = obs.PLACEMENTS.labels(policy, "metrics")
        self.by_requests = obs.PLACEMENTS.labels(policy, "requests")
        self.hot = obs.HOT_PASSED_OVER.labels(policy)
        self.all_hot = obs.ALL_HOT.labels(policy)
        self.estimate = obs.ESTIMATE_CPU.labels(policy)


class Scheduler:
    def __init__(
        self,
        scheduler_name: str,
        binder: Binder,
        caches: Mapping[str, MetricsCache],
        queue: SchedulingQueue,
        bind_concurrency: int = 64,
        failure_event_interval: float = 60.0,
        rng: random.Random | None = None,
        state: ClusterState | None = None,
        profile: Profile = DEFAULT_PROFILE,
    ) -> None:
        self.profile = profile
        self.name = scheduler_name
        self.binder = binder
        self.caches = dict(caches)  # metrics source name -> its cache; policies pick one
        self.scheduled_by_policy: dict[str, int] = {}
        self.queue = queue
        self.state = state if state is not None else ClusterState(profile.placed_changed)
        self.policies = PolicySet()
        self.failure_event_interval = failure_event_interval
        self.rng = rng or random.Random()
        self.index = ScoreIndex(profile)
        # Fields plugins read of placed pods that a raw event's metadata shows; the rest come
        # from the spec, whose changes bump the generation.
        self._placed_from_metadata = [
            (field, FROM_METADATA[field])
            for field in profile.placed_fields
            if field in FROM_METADATA
        ]
        self.events = EventWriter(binder.event)
        self._slots = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        # The bind that owns each reservation (pod uid -> its task): an answer from any other
        # task (an attempt abandoned meanwhile) changes nothing.
        self._binds: dict[str, asyncio.Task[None]] = {}
        # Bumped when leadership ends (abandon): a loop of an earlier term stops at once.
        self._term = 0
        self._reported: dict[str, tuple[str, float]] = {}  # uid -> (message, monotonic time)
        # kube-scheduler's metrics; the profile label is the scheduler name.
        self._attempts = {r: obs.SCHEDULE_ATTEMPTS.labels(r, scheduler_name) for r in RESULTS}
        self._attempt_seconds = {r: obs.ATTEMPT_SECONDS.labels(r, scheduler_name) for r in RESULTS}
        self._bind_seconds = {
            s: obs.EXTENSION_POINT_SECONDS.labels("Bind", s, scheduler_name)
            for s in ("Success", "Error")
        }
        self._by_policy: dict[str, _PolicyMetrics] = {}
        # Pods of ours waiting for their scheduling gates: not queued, but pending.
        self._gated: set[str] = set()
        self._pending = {q: obs.PENDING.labels(q) for q in obs.QUEUES}
        queue.on_count = self._queue_changed  # the gauge follows every queue change
        for where, count in queue.counts().items():
            self._queue_changed(where, count)
        self._pending["gated"].set(0)
        # Preemption: PodDisruptionBudgets (namespace/name), and our pending pods nominated to
        # a node (uid), whose room other pods of no higher priority must leave alone.
        self.budgets: dict[str, DisruptionBudget] = {}
        self.nominated: dict[str, PodInfo] = {}
        self.device_classes = DeviceClasses()  # DRA-backed extended resources: refused

    # --- watch events ------------------------------------------------------------------------
    def on_node_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = (raw.get("metadata") or {}).get("name")
        if not name:
            return
        if event_type == "DELETED":
            self.state.delete_node(name)
            self.queue.move_all_to_active()  # spread minimums may change
            return
        old = self.state.nodes.get(name)
        new = self.state.upsert_node(raw)
        if self.profile.node_changed(old, new):
            self.queue.move_all_to_active()

    def on_namespace_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        if event_type == "DELETED":
            self.state.delete_namespace(name)
        elif self.state.upsert_namespace(name, meta.get("labels") or {}) and (
            self.profile.reads_namespaces  # e.g. affinity terms' namespace selectors
        ):
            self.queue.move_all_to_active()

    def on_budget_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        key = namespaced_name(raw)
        if event_type == "DELETED":
            self.budgets.pop(key, None)
        else:
            self.budgets[key] = parse_budget(raw)

    def relisted_budgets(self, keys: set[str]) -> None:
        for key in set(self.budgets) - keys:
            del self.budgets[key]

    def on_pod_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        if event_type == "DELETED":
            self._forget_pod(uid)
            if self.state.remove_pod(uid):
                self.queue.move_all_to_active()
            return
        spec = raw.get("spec") or {}
        node_name = spec.get("nodeName")
        if node_name:
            self._forget_pod(uid)
            terminal = is_terminal(raw)
            known = self.state.pods.get(uid)
            if (
                known is not None
                and known.node_name == node_name
                and not terminal
                and not known.assumed
                and known.generation == int(meta.get("generation") or 0)
                and all(getattr(known, f) == read(meta) for f, read in self._placed_from_metadata)
                and known.resize_key == resize_key(raw.get("status") or {})
            ):
                # Cheap path: most pod events are status churn. What preemption reads of the
                # status (no plugin does) is kept current in place: the kubelet writes the
                # start time after the binding, and the victim mark may come after the delete.
                status = raw.get("status") or {}
                started = status.get("startTime") or ""
                if started != known.start_time:
                    known.start_time = str(started)
                if known.deleting:
                    known.preempted = preempted_by_scheduler(status)
                return
            pod = parse_pod(raw, placed=True)
            changed = known is None or self.profile.placed_changed(known, pod)
            if self.state.observe_bound(pod, terminal):
                self.queue.move_all_to_active()
            elif changed and not terminal:
                # A pod placed (or relabelled) can satisfy parked pods' affinity or spread.
                self.queue.move_all_to_active(only_waiting_for_pods=True)
            return
        if spec.get("schedulerName") != self.name:
            return
        if meta.get("deletionTimestamp") or is_terminal(raw):
            self._forget_pod(uid)
            return
        pod = parse_pod(raw)
        if pod.nominated_node:
            self.nominated[uid] = pod
        else:
            self.nominated.pop(uid, None)
        if uid in self.state.pods:  # assumed: our bind is in flight; keep its data current
            self.queue.refresh(pod)  # for a retry, should the bind fail
            return
        if pod.gated:  # scheduling gates: not queued until they are all removed, but its
            # nomination still holds room (kube-scheduler's nominator records gated pods too)
            self.queue.remove(uid)
            self._reported.pop(uid, None)
            self._gated.add(uid)
            self._pending["gated"].set(len(self._gated))
            return
        self._ungate(uid)
        self.queue.add(pod)

    # --- relists: keys present in a fresh list; anything else was deleted unseen --------------
    def relisted_pods(self, uids: set[str]) -> int:
        """Forget pods a fresh list no longer shows; returns how many were dropped."""
        gone_queued = [uid for uid in [*self.queue.uids(), *self._gated] if uid not in uids]
        for uid in gone_queued:
            self._forget_pod(uid)
        for uid in set(self.nominated) - uids:
            del self.nominated[uid]
        gone = set(self.state.pods) - uids
        if self.state.drop_missing(gone, set()):
            self.queue.move_all_to_active()
        return len(gone_queued) + len(gone)

    def relisted_nodes(self, names: set[str]) -> int:
        """Forget nodes a fresh list no longer shows; returns how many were dropped."""
        gone = set(self.state.nodes) - names
        if self.state.drop_missing(set(), gone):
            self.queue.move_all_to_active()
        return len(gone)

    def relisted_namespaces(self, names: set[str]) -> None:
        for name in set(self.state.namespaces) - names:
            self.state.delete_namespace(name)

    def _forget_pod(self, uid: str) -> None:
        self.queue.remove(uid)
        self.nominated.pop(uid, None)
        self._reported.pop(uid, None)
        self._ungate(uid)

    def _ungate(self, uid: str) -> None:
        if uid in self._gated:
            self._gated.discard(uid)
            self._pending["gated"].set(len(self._gated))

    def _queue_changed(self, where: Where, count: int) -> None:
        gauge = self._pending.get(where)  # in flight is not pending (nor in kube-scheduler)
        if gauge is not None:
            gauge.set(count)

    # --- policies ----------------------------------------------------------------------------
    def apply_policy(self, name: str, spec: Mapping[str, Any] | None) -> Policy:
        """Validate and install a policy; raises ValueError (and drops any previous version)."""
        try:
            policy = Policy(name, parse_spec(spec))
        except ValueError:
            self.policies.remove(name)
            raise
        self.policies.upsert(policy)
        self.queue.move_all_to_active()
        return policy

    def remove_policy(self, name: str) -> None:
        self.policies.remove(name)

    # --- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        term = self._term
        log.info("scheduler %s running", self.name)
        try:
            while True:
                await self._slots.acquire()
                try:
                    pod = await self.queue.pop()
                except BaseException:  # cancelled while waiting (leadership lost, shutdown)
                    self._slots.release()
                    raise
                if term != self._term:
                    # Leadership ended while this loop waited (a cancellation can be lost on
                    # the way in): the pod is not ours to place any more.
                    self.queue.retry_now(pod.uid)
                    self._slots.release()
                    return
                handed_off = False
                try:
                    handed_off = self.schedule(pod)
                except Exception:  # a bug must cost one attempt, never the loop
                    log.exception(
                        "scheduling %s failed; retrying after backoff",
                        pod.key,
                        extra={"pod": pod.key},
                    )
                    self._attempts["error"].inc()
                    self.state.forget(pod.uid)
                    self.queue.backoff(pod.uid)
                finally:
                    if not handed_off:
                        self._slots.release()
        finally:
            if term == self._term:  # stopped otherwise than by abandon(): end the term here
                self.abandon()

    def schedule(self, pod: PodInfo) -> bool:
        """One cycle for one pod. The caller holds a bind slot: returns True when the slot was
        handed to a task it started (which releases it), False when the caller keeps it."""
        if pod.uid in self.state.pods:  # bound or assumed meanwhile
            self.queue.done(pod.uid)
            return False
        policy = self.policies.for_pod(
            pod.labels, self.state.namespaces.get(pod.namespace), pod.scheduler_name
        )
        started = time.perf_counter()
        samples, now = self.samples_for(policy), time.time()
        learned = self.learned_for(policy)
        held = self.held_for(pod) if self.nominated else {}
        result: Decision | Unschedulable | None
        refused = self.device_classes.refusal(pod)
        if refused is not None:  # DRA decides this pod's fit: loadwise cannot
            result = Unschedulable(f"pod cannot be scheduled: {refused}", {})
        elif held or pod.nominated_node:  # rare: while preemption makes room somewhere
            nominated = Nominated(self.state, held)
            result = schedule_one(
                pod, self.state, policy, samples, now, self.rng, self.profile, learned, nominated
            )
        else:
            result = self.index.schedule(pod, self.state, policy, samples, now, self.rng, learned)
            if result is None:  # an invalid pod: the full cycle says why
                result = schedule_one(pod, self.state, policy, samples, now, self.rng)
        done = time.perf_counter()
        obs.ALGORITHM_SECONDS.observe(done - started)
        if isinstance(result, Decision):
            self._observe_decision(result, samples)
            self.state.assume(pod, result.node)
            if pod.anti_affinity_terms or self.queue.waiting_for_pods:
                # Assumed pods count like placed ones (affinity, spread, anti-affinity).
                self.queue.move_all_to_active(only_waiting_for_pods=True)
            task = self._spawn(self._bind(pod, result, started))
            self._binds[pod.uid] = task
            task.add_done_callback(functools.partial(self._bind_ended, pod.uid))
            return True
        self._attempts["unschedulable"].inc()
        self._attempt_seconds["unschedulable"].observe(done - started)
        message = result.message
        outcome = None if pod.invalid_reason or refused else self.post_filter(pod, policy, held)
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
            self._spawn(self._preempt(pod, outcome, message))
            self._reported[pod.uid] = (message, time.monotonic())
            return True
        if self._should_report(pod.uid, message):
            self._spawn(self._report_unschedulable(pod, message))
            return True
        return False

    # --- preemption --------------------------------------------------------------------------
    def held_for(self, pod: PodInfo) -> dict[str, list[PodInfo]]:
        """Per node, copies placed there of the pods nominated to it that `pod` must leave
        room for: of equal or higher priority, not itself (kube-scheduler's
        addGENominatedPods)."""
        held: dict[str, list[PodInfo]] = {}
        for other in self.nominated.values():
            if other.uid == pod.uid or other.priority < pod.priority:
                continue
            node = other.nominated_node
            if node in self.state.nodes and other.uid not in self.state.pods:
                copy = dataclasses.replace(other, node_name=node, assumed=True)
                held.setdefault(node, []).append(copy)
        return held

    def post_filter(
        self, pod: PodInfo, policy: Policy, held: Mapping[str, list[PodInfo]]
    ) -> Preemption | NoPreemption | None:
        """DefaultPreemption for a pod no node can take (framework/preemption.py). None when
        no placed pod has a lower priority (most clusters, most of the time): nothing to try,
        and the FailedScheduling message stays the filters' alone, where kube-scheduler would
        append "preemption: 0/N nodes are available: N No preemption victims found ..."."""
        obs.PREEMPTION_ATTEMPTS.inc()
        state = self.state
        if not state.any_below(pod.priority):
            return None
        samples, now, learned = self.samples_for(policy), time.time(), self.learned_for(policy)

        def load_of(name: str) -> float:
            node = state.nodes[name]
            return weighted_load(
                policy, score_node(pod, node, state, policy, samples, now, learned)
            )

        budgets = list(self.budgets.values())
        return preempt(pod, state, self.profile.filters, budgets, held, self.rng, load_of)

    async def _preempt(self, pod: PodInfo, preemption: Preemption, message: str) -> None:
        """Carry a preemption out: the pod is nominated to the node at once (here, so no
        pod of no higher priority takes the room), lower-priority nominations there are
        cleared, the victims are marked and deleted, and the pod's status and events say so.
        The pod waits parked until the victims' deletion moves it."""
        node = preemption.node
        try:
            pod.nominated_node = node
            self.nominated[pod.uid] = pod
            lower = [
                other
                for other in self.nominated.values()
                if other.nominated_node == node and other.priority < pod.priority
            ]
            for other in lower:
                other.nominated_node = ""
                del self.nominated[other.uid]
            victims = preemption.victims
            obs.PREEMPTION_VICTIMS.observe(len(victims))
            names = ", ".join(v.key for v in victims)
            log.info(
                "preempting %d pod(s) on %s for %s: %s",
                len(victims),
                node,
                pod.key,
                names,
                extra={"pod": pod.key, "node": node},
            )
            await asyncio.gather(
                *(self.binder.evict(v, pod, node) for v in victims if not v.deleting),
                *(self.binder.clear_nomination(other) for other in lower),
            )
            await self.binder.event(pod, "Warning", "FailedScheduling", message)
            await self.binder.mark_unschedulable(pod, message, nominated_node=node)
            await self.binder.event(
                pod,
                "Normal",
                "Preempting",
                f"Preempting {len(victims)} pod(s) on node {node} to make room: {names}",
            )
        except Exception:  # best effort, as the binder's writes: the loop goes on
            log.exception("preemption for %s failed", pod.key, extra={"pod": pod.key})

    def _observe_decision(self, decision: Decision, samples: Mapping[str, NodeSample]) -> None:
        metrics = self._by_policy.get(decision.policy)
        if metrics is None:
            metrics = self._by_policy[decision.policy] = _PolicyMetrics(decision.policy)
        chosen = decision.chosen
        sample = samples.get(chosen.node)
        if chosen.source == "metrics" and sample is not None:
            metrics.by_metrics.inc()
            metrics.estimate.observe(max(0.0, chosen.cpu - sample.cpu))
        else:
            metrics.by_requests.inc()
        if decision.hot_skipped:
            metrics.hot.inc(decision.hot_skipped)
        if decision.all_hot:
            metrics.all_hot.inc()

    def samples_for(self, policy: Policy) -> Mapping[str, NodeSample]:
        cache = self.caches.get(policy.spec.metrics.source)
        return cache.samples if cache is not None else {}

    def learned_for(self, policy: Policy) -> UsageProfiles | None:
        """The usage learned per workload by the policy's source. It changes only with a
        refresh, which also replaces the source's samples mapping (the score index's key)."""
        cache = self.caches.get(policy.spec.metrics.source)
        return cache.learned if cache is not None else None

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        """A task that holds a bind slot: the slot is released when the task ends, however
        it ends (a task cancelled before its first step never runs its own `finally`)."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_ended)
        return task

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    def _bind_ended(self, uid: str, task: asyncio.Task[None]) -> None:
        """A bind task ended without settling its pod (cancelled, even before it started, or
        crashed): release its reservation and retry the pod."""
        if self._binds.get(uid) is task:
            del self._binds[uid]
            self._release(uid)

    def _release(self, uid: str) -> None:
        """Unreserve a pod whose bind did not land and put it back in the queue (an attempt
        abandoned, not failed: no backoff). A pod whose bind landed is only taken off the
        queue: the watch brings it."""
        pod = self.state.pods.get(uid)
        if pod is not None and pod.bind_landed:
            self.queue.done(uid)
            return
        self.state.forget(uid)
        if uid in self.queue:
            self.queue.retry_now(uid)
        elif pod is not None and pod.assumed:  # its queue entry is gone: queue it again
            self.queue.add(dataclasses.replace(pod, node_name="", assumed=False))

    def _should_report(self, uid: str, message: str) -> bool:
        now = time.monotonic()
        last = self._reported.get(uid)
        if last is not None and last[0] == message and now - last[1] < self.failure_event_interval:
            return False
        self._reported[uid] = (message, now)
        return True

    async def _bind(self, pod: PodInfo, decision: Decision, attempt_started: float) -> None:
        """`attempt_started`: perf_counter at the start of the pod's cycle (the attempt's
        duration is cycle plus bind, as kube-scheduler's)."""
        started = time.perf_counter()
        try:
            result = await self.binder.bind(pod, decision.node)
        except Exception:  # Binder.bind classifies errors itself; this is the backstop
            log.exception("bind of %s raised", pod.key, extra={"pod": pod.key})
            result = BindResult.ERROR
        if self._binds.get(pod.uid) is not asyncio.current_task():
            # Abandoned while the request ran on (leadership lost, reservation expired):
            # the reservation was released then, and the watch shows what the request did.
            log.info(
                "bind of %s to %s answered %s after it was abandoned",
                pod.key,
                decision.node,
                result.value,
                extra={"pod": pod.key, "node": decision.node},
            )
            return
        del self._binds[pod.uid]
        finished = time.perf_counter()
        status = "Success" if result is BindResult.BOUND else "Error"
        self._bind_seconds[status].observe(finished - started)
        if result is BindResult.BOUND:
            pod.bind_landed = True  # a relist that no longer shows it may now drop it
            by_policy = self.scheduled_by_policy
            by_policy[decision.policy] = by_policy.get(decision.policy, 0) + 1
            entry = self.queue.done(pod.uid)
            self._reported.pop(pod.uid, None)
            self._attempts["scheduled"].inc()
            self._attempt_seconds["scheduled"].observe(finished - attempt_started)
            if entry is not None:
                attempts = entry.attempts + 1  # the failed ones and this one
                obs.SLI_SECONDS.labels(str(attempts)).observe(
                    max(0.0, self.queue.clock() - entry.queued_at)
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
            message = (
                f"Successfully assigned {pod.key} to {decision.node}; {decision_record(decision)}"
            )
            self.events.emit(pod, "Normal", "Scheduled", message)
        elif result in (BindResult.GONE, BindResult.CONFLICT):
            # Deleted, or bound by someone else: the watch brings the truth. Still a failed
            # attempt, counted as kube-scheduler counts a failed bind: result "error".
            self._attempts["error"].inc()
            self._attempt_seconds["error"].observe(finished - attempt_started)
            self.state.forget(pod.uid)
            self.queue.done(pod.uid)
        else:
            self._attempts["error"].inc()
            self._attempt_seconds["error"].observe(finished - attempt_started)
            self.state.forget(pod.uid)
            self.queue.backoff(pod.uid)

    async def _report_unschedulable(self, pod: PodInfo, message: str) -> None:
        await self.binder.event(pod, "Warning", "FailedScheduling", message)
        await self.binder.mark_unschedulable(pod, message)

    def abandon(self) -> None:
        """Leadership lost: end the term, stop every bind and report in flight at once. What
        was reserved for binds that did not land is released and their pods wait in the queue,
        so a later term (or the next leader, whose watch shows what did land) starts from the
        truth. Synchronous: nothing new is sent after it returns."""
        self._term += 1
        for task in list(self._tasks):
            task.cancel()
        binds, self._binds = self._binds, {}
        for uid in [*binds, *self.queue.in_flight()]:
            self._release(uid)
        # Whatever is still reserved has no bind behind it: a reservation this replica cannot
        # account for (the audit's invariant, enforced at every hand-over).
        self.audit_reservations(bound=0.0)

    def audit_reservations(self, bound: float) -> int:
        """The reservation invariant: a pod reserved on a node is, within `bound` seconds
        (the bind timeout plus the longest backoff), seen bound, or its bind is still being
        tried; otherwise its reservation is released and it is queued again. A reservation
        with no bind behind it at all is released at once. Returns how many were released."""
        now = time.monotonic()
        released = 0
        for uid, since in list(self.state.assumed.items()):
            pod = self.state.pods.get(uid)
            if pod is None or pod.bind_landed:
                continue  # our bind landed: the watch will show it (a deletion drops it)
            task = self._binds.get(uid)
            if task is not None and now - since <= bound:
                continue
            log.error(
                "reservation of %s on %s released: %s",
                pod.key,
                pod.node_name,
                f"its bind has not answered in {now - since:.0f}s"
                if task is not None
                else "no bind is in flight for it",
                extra={"pod": pod.key, "node": pod.node_name},
            )
            if task is not None:
                del self._binds[uid]
                task.cancel()
            self._release(uid)
            released += 1
        if released:
            obs.RESERVATIONS_RELEASED.inc(released)
        obs.STALE_RESERVATIONS.set(released)
        return released

    def oldest_reservation(self) -> float:
        """Age in seconds of the oldest reservation whose bind has not landed (0 if none)."""
        now = time.monotonic()
        ages = [
            now - since
            for uid, since in self.state.assumed.items()
            if (pod := self.state.pods.get(uid)) is not None and not pod.bind_landed
        ]
        return max(ages, default=0.0)

    def trim_placements(self, keep: float) -> int:
        """Trim the state's placement log: a node's entries are needed only after the oldest
        coverage of its samples in any cache, and (for samples yet to come) the last `keep`
        seconds."""
        floor = time.time() - keep
        caches = list(self.caches.values())

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
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.events.flush()
