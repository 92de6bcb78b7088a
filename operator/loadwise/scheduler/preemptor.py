"""Preemptor: the scheduler's side of DefaultPreemption (the algorithm is framework/preemption.py).

It keeps what preemption reads besides the cluster state: the PodDisruptionBudgets, and the
pods of ours nominated to a node (by our own preemption or by another component, KEP-5278),
whose room pods of no higher priority must leave alone. It is the PostFilter plugin for a pod
no node can take (in the profile when preemption is on), and carries a preemption out:
nominate, clear lower nominations there, evict the victims through the binder, and say so in
the pod's status and events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Collection, Mapping
from typing import Any

from .. import observability as obs
from ..framework.disruption_budgets import DisruptionBudget, parse_budget
from ..framework.plugin import NoPreemption, PostFilterPlugin, Preemption
from ..framework.preemption import preempt
from ..framework.profile import Profile
from ..framework.types import PodInfo
from .binding.binder import Binder
from .state import ClusterState
from .workload_selectors import namespaced_name

log = logging.getLogger(__name__)


class Preemptor(PostFilterPlugin):
    name = "DefaultPreemption"

    def __init__(
        self,
        state: ClusterState,
        binder: Binder,
        profile: Profile,
        rng: random.Random,
        widen: Callable[[Preemption], Preemption] = lambda preemption: preemption,
    ) -> None:
        """`profile`: whose filters judge the nodes without the victims; `widen`: the victims
        that go with those chosen (a PodGroup evicted whole)."""
        self.state = state
        self.widen = widen
        self.binder = binder
        self.profile = profile
        self.rng = rng
        self.budgets: dict[str, DisruptionBudget] = {}  # namespace/name -> budget
        self.nominated: dict[str, PodInfo] = {}  # uid -> our pending pod nominated to a node

    # --- what preemption reads, kept current by watch events ----------------------------------
    def on_budget_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        key = namespaced_name(raw)
        if event_type == "DELETED":
            self.budgets.pop(key, None)
        else:
            self.budgets[key] = parse_budget(raw)

    def relisted_budgets(self, keys: set[str]) -> None:
        for key in set(self.budgets) - keys:
            del self.budgets[key]

    def observe(self, pod: PodInfo) -> None:
        """A pending pod of ours, as its latest event shows it (gated or not: a nomination of
        a gated pod holds room too, as kube-scheduler's nominator records gated pods)."""
        if pod.nominated_node:
            self.nominated[pod.uid] = pod
        else:
            self.nominated.pop(pod.uid, None)

    def forget(self, uid: str) -> None:
        self.nominated.pop(uid, None)

    def relisted_pods(self, uids: set[str]) -> None:
        for uid in set(self.nominated) - uids:
            del self.nominated[uid]

    # --- the PostFilter -------------------------------------------------------------------------
    def held_for(self, pod: PodInfo, siblings: Collection[str] = ()) -> dict[str, list[PodInfo]]:
        """Per node, copies placed there of the pods nominated to it that `pod` must leave
        room for: of equal or higher priority, not itself (kube-scheduler's
        addGENominatedPods), nor `siblings`: the members of its group decided in the same
        cycle, each assumed in turn, are never held against each other."""
        held: dict[str, list[PodInfo]] = {}
        for other in self.nominated.values():
            if other.uid == pod.uid or other.priority < pod.priority or other.uid in siblings:
                continue
            node = other.nominated_node
            if node in self.state.nodes and other.uid not in self.state.pods:
                copy = dataclasses.replace(other, node_name=node, assumed=True)
                held.setdefault(node, []).append(copy)
        return held

    def post_filter(
        self,
        pod: PodInfo,
        held: Mapping[str, list[PodInfo]],
        load_of: Callable[[str], float] | None = None,
    ) -> Preemption | NoPreemption | None:
        """DefaultPreemption for a pod no node can take. None when no placed pod has a lower
        priority (most clusters, most of the time): nothing to try, and the FailedScheduling
        message stays the filters' alone, where kube-scheduler would append "preemption: 0/N
        nodes are available: N No preemption victims found ...". `load_of` ranks a node's
        load, for ties between equally good candidates."""
        obs.PREEMPTION_ATTEMPTS.inc()
        if not any(p < pod.priority for p in self.state.priorities):
            return None
        budgets = list(self.budgets.values())
        filters = self.profile.filters
        outcome = preempt(pod, self.state, filters, budgets, held, self.rng, load_of)
        return self.widen(outcome) if isinstance(outcome, Preemption) else outcome

    # --- carrying it out ------------------------------------------------------------------------
    def nominate(self, pod: PodInfo, node: str) -> list[PodInfo]:
        """Nominate `pod` to `node` at once (so no pod of no higher priority takes the room)
        and clear lower-priority nominations there; returns the pods whose nomination ended."""
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
        return lower

    async def carry_out(
        self, pod: PodInfo, preemption: Preemption, message: str, cleared: list[PodInfo]
    ) -> None:
        """After `nominate` (in the cycle itself): the victims are marked and deleted, the
        nominations it ended (`cleared`) are cleared, and the pod's status and events say so.
        The pod waits parked until the victims' deletion moves it."""
        node = preemption.node
        try:
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
                *(self.binder.preempt_victim(v, pod, node) for v in victims if not v.deleting),
                *(self.binder.clear_nomination(other) for other in cleared),
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
