"""Watch events into the scheduler's state and queue: kube-scheduler's eventhandlers. Cheap and
synchronous; which changes can make a rejected pod fit comes from the plugins' declarations
(profile.py). Pods bound by anyone are accounted on their nodes; pending pods named for this
scheduler are queued unless a PreEnqueue plugin holds them (scheduling gates, a PodGroup short
of its minimum); a held pod's nomination still holds room, as kube-scheduler's nominator records
gated pods too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..framework.profile import Profile
from ..framework.types import (
    FROM_METADATA,
    PodInfo,
    is_terminal,
    parse_pod,
    preempted_by_scheduler,
    resize_key,
    true_since,
)
from .pod_groups.cool_room import FreedRoom
from .preemptor import Preemptor
from .queue import SchedulingQueue
from .state import ClusterState

# A pending pod another scheduler places, as its event shows it (its uid, the raw pod).
ForeignPod = Callable[[str, Mapping[str, Any]], None]


class Watcher(Protocol):
    """Told of other schedulers' pods: pending, then bound (before the state takes the pod
    in). The shadow trial (shadow.py) is one."""

    def pending(self, uid: str, raw: Mapping[str, Any]) -> None: ...

    def placed(self, pod: PodInfo) -> None: ...


class ClusterEvents:
    def __init__(
        self,
        scheduler_name: str,
        state: ClusterState,
        queue: SchedulingQueue,
        profile: Profile,
        preemption: Preemptor,
        reported: dict[str, tuple[str, float]],
        foreign: ForeignPod,
        freed: FreedRoom | None = None,
    ) -> None:
        """`foreign`: told of pending pods other schedulers place (a PodGroup counts them);
        `freed`: told of pods leaving their nodes (a gang waiting for cool room reads it)."""
        self.freed = freed if freed is not None else FreedRoom()
        self.name = scheduler_name
        self.state = state
        self.queue = queue
        self.profile = profile
        self.preemption = preemption
        self._foreign = foreign
        self.watcher: Watcher | None = None  # set by the shadow trial
        self._reported = reported  # the scheduler's last failure report per pod: forgotten here
        # Fields plugins read of placed pods that a raw event's metadata shows; the rest come
        # from the spec, whose changes bump the generation.
        self._placed_from_metadata = [
            (field, FROM_METADATA[field])
            for field in profile.placed_fields
            if field in FROM_METADATA
        ]

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

    def on_pod_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        if event_type == "DELETED":
            self._forget_pod(uid)
            if (gone := self.state.pods.get(uid)) is not None:
                self.freed.freed(gone)
            if self.state.remove_pod(uid):
                self.queue.move_all_to_active()
            return
        spec = raw.get("spec") or {}
        node_name = spec.get("nodeName")
        if node_name:
            self._forget_pod(uid)
            terminal = is_terminal(raw)
            known = self.state.pods.get(uid)
            if terminal and known is not None:
                self.freed.freed(known)
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
                if not known.ready_at:  # rebalancing: when its use starts to show
                    known.ready_at = true_since(status, "Ready")
                if known.deleting:
                    known.preempted = preempted_by_scheduler(status)
                return
            pod = parse_pod(raw, placed=True)
            if known is None and self.watcher is not None and not terminal:
                self.watcher.placed(pod)
            changed = known is None or self.profile.placed_changed(known, pod)
            if self.state.observe_bound(pod, terminal):
                self.queue.move_all_to_active()
            elif changed and not terminal:
                # A pod placed (or relabelled) can satisfy parked pods' affinity or spread.
                self.queue.move_all_to_active(only_waiting_for_pods=True)
            return
        if spec.get("schedulerName") != self.name:
            self._foreign(uid, raw)
            if self.watcher is not None:
                self.watcher.pending(uid, raw)
            return
        if meta.get("deletionTimestamp") or is_terminal(raw):
            self._forget_pod(uid)
            return
        pod = parse_pod(raw)
        self.preemption.observe(pod)
        if uid in self.state.pods:  # assumed: our bind is in flight; keep its data current
            self.queue.refresh(pod)  # for a retry, should the bind fail
            return
        if self.profile.pre_enqueue(pod) is not None:  # held: not queued, not tried
            self.queue.remove(uid)
            self._reported.pop(uid, None)
            return
        self.queue.add(pod)

    # relists: keys present in a fresh list; anything else was deleted unseen
    def relisted_pods(self, uids: set[str]) -> int:
        """Forget pods a fresh list no longer shows; returns how many were dropped."""
        queued = [*self.queue.uids(), *self.profile.known_held()]
        gone_queued = [uid for uid in queued if uid not in uids]
        for uid in gone_queued:
            self._forget_pod(uid)
        self.preemption.relisted_pods(uids)
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
        self.preemption.forget(uid)
        self._reported.pop(uid, None)
        self.profile.forget_held(uid)
