"""Evictor: carries out one planned move (framework/rebalance.py's Move) for rebalancing.

In order: the move is recorded and the ledger saved (a new leader then knows it was asked
for), the pod is evicted through the Eviction API (PodDisruptionBudgets hold: a 429 is a
refusal, tried again after `BLOCKED_SECONDS`), and the answer is recorded. An eviction that
happened is an event on the pod and on both nodes, a log line and a count; the room on the
target is held for the replacement and the workload kept off the source (moves.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ... import observability as obs
from ...framework.rebalance import Move
from ...kube.transport import Http
from ...logs import one_line
from ...policies.policy import Policy
from ..binding.binder import Binder
from .move_store import MoveStore, StoreError
from .moves import MoveRecord, Moves

log = logging.getLogger(__name__)
BLOCKED_SECONDS = 60.0  # a pod whose budget refused its eviction is not tried again before


def eviction_body(move: Move) -> dict[str, Any]:
    pod = move.pod
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        # a newer pod under that name is never evicted by a plan made for this one
        "deleteOptions": {"preconditions": {"uid": pod.uid}},
    }


class Evictor:
    def __init__(self, transport: Http, binder: Binder, moves: Moves, store: MoveStore) -> None:
        self.transport = transport
        self.binder = binder
        self.moves = moves
        self.store = store
        self.blocked: dict[str, float] = {}  # pod uid -> when it may be tried again

    def record_for(self, policy: Policy, move: Move, now: float) -> MoveRecord:
        pod = move.pod
        assert pod.owner is not None  # only pods a controller recreates are candidates
        settings = policy.spec.rebalance
        return MoveRecord(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            owner=pod.owner,
            policy=policy.name,
            source=move.source,
            target=move.target,
            at=now,
            gone_by=now + move.grace,
            reserve_until=now + settings.reservation_seconds,
            cool_until=now + settings.cool_down_seconds,
            priority=pod.priority,
            requests=dict(pod.requests.amounts),
            nonzero=pod.requests.nonzero,
            labels=dict(pod.labels),
            used=move.used,
        )

    async def move(self, policy: Policy, move: Move, over: Mapping[str, float], now: float) -> str:
        """Evict the pod; returns what happened: evicted, disruption-budget, gone, error or
        unrecorded (the ledger could not be saved: nothing was asked)."""
        pod = move.pod
        record = self.record_for(policy, move, now)
        self.moves.add(record)
        try:
            await self.store.save(self.moves)
        except StoreError as exc:
            self.moves.settle(pod.uid, evicted=False, now=now)
            log.warning("not evicting %s: the rebalancing ledger was not saved: %s", pod.key, exc)
            return "unrecorded"
        outcome = await self._evict(move)
        self.moves.settle(pod.uid, evicted=outcome == "evicted", now=now)
        try:
            await self.store.save(self.moves)
        except StoreError as exc:  # the next save or a new leader's load settles it
            log.warning("rebalancing ledger not saved after evicting %s: %s", pod.key, exc)
        reason = "+".join(sorted(over)) or "none"
        if outcome == "evicted":
            obs.REBALANCE_EVICTIONS.labels(policy.name, reason).inc()
            await self._announce(policy, move, over)
        else:
            obs.REBALANCE_EVICTIONS_REFUSED.labels(policy.name, outcome).inc()
        if outcome == "disruption-budget":
            self.blocked[pod.uid] = now + BLOCKED_SECONDS
            message = (
                f"not evicted from {move.source} to relieve it: its PodDisruptionBudget allows "
                f"no disruption now; tried again in {BLOCKED_SECONDS:.0f}s at the earliest"
            )
            log.info("%s %s", pod.key, message, extra={"pod": pod.key, "node": move.source})
            await self.binder.event(pod, "Normal", "EvictionBlocked", message)
        return outcome

    def is_blocked(self, uid: str, now: float) -> bool:
        until = self.blocked.get(uid)
        if until is not None and until <= now:
            del self.blocked[uid]
            return False
        return until is not None

    async def _evict(self, move: Move) -> str:
        pod = move.pod
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
        try:
            status, data = await self.transport.request("POST", path, eviction_body(move))
        except Exception as exc:  # network: nothing is known to have happened
            log.warning("evicting %s failed: %s", pod.key, one_line(exc))
            return "error"
        if status < 300:
            return "evicted"
        if status == 429:
            return "disruption-budget"
        if status in (404, 409):  # gone, or a newer pod has the name
            return "gone"
        log.warning("evicting %s failed: HTTP %s %s", pod.key, status, data[:300])
        return "error"

    async def _announce(self, policy: Policy, move: Move, over: Mapping[str, float]) -> None:
        pod, chosen = move.pod, move.decision.chosen
        shares = ", ".join(f"{r} {share:.0%} over" for r, share in over.items())
        settings = policy.spec.rebalance
        message = (
            f"evicted from {move.source} to relieve it ({shares} its hot thresholds for "
            f"{settings.hot_refreshes} refreshes): its replacement has room held on "
            f"{move.target} (cpu {chosen.cpu:.0%} mem {chosen.memory:.0%} with it) for "
            f"{settings.reservation_seconds}s and stays off {move.source} for "
            f"{settings.cool_down_seconds}s; policy {policy.name}"
        )
        log.info("%s %s", pod.key, message, extra={"pod": pod.key, "node": move.source})
        await self.binder.event(pod, "Normal", "Rebalanced", message)
        for node, text in (
            (move.source, f"evicted {pod.key} to relieve this node; it goes to {move.target}"),
            (move.target, f"holds room for the replacement of {pod.key}, moved off {move.source}"),
        ):
            involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
            await self.binder.object_event(
                involved, "Normal", "Rebalanced", f"{text}; policy {policy.name}"
            )
