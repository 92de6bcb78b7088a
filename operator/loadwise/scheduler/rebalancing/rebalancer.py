"""Rebalancer: the leader's look, after each metrics refresh, at nodes that stay hot under a
policy with `spec.rebalance.enabled`, and what to move where (framework/rebalance.py plans it
with the scheduling cycle, within the rate limits the ledger of past moves leaves).

DryRun: each planned move is a `WouldEvict` event on the pod, a log line and a count. Evict: the
evictor carries the moves out (evictor.py), only once this leader has read the saved ledger
(move_store.py); a node moved from is judged again only once its samples no longer include what
left it.

Nothing here raises into its loop: a failed pass is logged and the next refresh tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Mapping
from typing import Any, Protocol

from ... import observability as obs
from ...framework.context import Basis
from ...framework.disruption_budgets import split_violating
from ...framework.heat import hot_for, hot_nodes
from ...framework.profile import Profile
from ...framework.rebalance import (
    Candidate,
    HotStreaks,
    Limits,
    Relief,
    ineligible,
    plan_relief,
)
from ...framework.types import NodeInfo, PodInfo, is_terminal, parse_pod
from ...kube.transport import Http
from ...policies.policy import Policy
from ...policies.policy_set import PolicySet
from ...policies.priority_bands import band_of
from ...resources import CPU, MEMORY
from ...usage.cache import NodeSample
from ..binding.binder import Binder
from ..preemptor import Preemptor
from ..state import ClusterState
from ..usage_sources import UsageSources
from .evictor import Evictor
from .move_store import MoveStore, StoreError
from .moves import Moves

log = logging.getLogger(__name__)


class Scheduling(Protocol):
    """What rebalancing reads of the scheduler it works beside (the Scheduler is one): plans
    are made by the same cycle, on the same state, under the same policies and samples."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> ClusterState: ...
    @property
    def policies(self) -> PolicySet: ...
    @property
    def usage(self) -> UsageSources: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def profile(self) -> Profile: ...
    @property
    def moves(self) -> Moves: ...
    @property
    def preemption(self) -> Preemptor: ...  # its PodDisruptionBudgets


class Rebalancer:
    def __init__(
        self,
        transport: Http,
        binder: Binder,
        scheduler: Scheduling,
        store: MoveStore,
        evictions: bool = False,
    ) -> None:
        self.transport = transport
        self.evictions = evictions  # the operator's rebalance_evictions: Evict mode may evict
        self.binder = binder
        self.scheduler = scheduler
        self.moves = scheduler.moves
        self.store = store
        self.evictor = Evictor(transport, binder, self.moves, store)
        self._streaks: dict[str, HotStreaks] = {}  # policy -> its nodes' hot/cool streaks
        self._seen_refresh: dict[str, int] = {}  # policy -> its source's refresh count judged
        self._reported: dict[tuple[str, str], str] = {}  # (policy, node) -> last plan said

    async def run(self, interval: float) -> None:
        """Until cancelled, when this replica stops leading."""
        try:
            while True:
                try:
                    await self.run_once(time.time())
                except Exception:  # a bug must cost one pass, never the loop
                    log.exception("rebalancing pass failed; trying again in %.0fs", interval)
                await asyncio.sleep(interval)
        finally:
            self.forget()

    def forget(self) -> None:
        """A new leader counts streaks afresh (its predecessor's are not known to it) and reads
        the saved ledger of moves before it evicts."""
        for policy in self._streaks:
            _drop_gauge(policy)
        self._streaks.clear()
        self._seen_refresh.clear()
        self._reported.clear()
        self.moves.forget()

    async def _ledger_ready(self, now: float) -> bool:
        """Read the saved ledger once per term (retried each pass until it works); then drop
        what expired. False while it cannot be read: nothing is evicted meanwhile."""
        if not self.moves.loaded:
            try:
                held = await self.store.load(self.moves, now)
            except StoreError as exc:
                log.warning("rebalancing evicts nothing until its ledger can be read: %s", exc)
                return False
            log.info("rebalancing ledger read: %d moves of the last hour", held)
        elif self.moves.prune(now):
            try:
                await self.store.save(self.moves)
            except StoreError as exc:
                log.warning("rebalancing ledger not saved: %s", exc)
        return True

    async def run_once(self, now: float) -> None:
        scheduler = self.scheduler
        enabled = {p.name: p for p in scheduler.policies.policies() if p.spec.rebalance.enabled}
        evicting = self.evictions and any(
            p.spec.rebalance.mode == "Evict" for p in enabled.values()
        )
        ready = evicting and await self._ledger_ready(now)
        for name in set(self._streaks) - set(enabled):
            _drop_gauge(name)
            del self._streaks[name]
            self._seen_refresh.pop(name, None)
        for name, policy in enabled.items():
            cache = scheduler.usage.cache_for(policy)
            if cache is None or self._seen_refresh.get(name) == cache.refreshes:
                continue  # streaks count refreshes, not passes
            self._seen_refresh[name] = cache.refreshes
            samples = scheduler.usage.samples_for(policy)
            nodes = scheduler.state.nodes
            settings = policy.spec.rebalance
            streaks = self._streaks.setdefault(name, HotStreaks())
            relieving = streaks.update(
                hot_nodes(policy, samples, nodes, now),
                nodes,
                settings.hot_refreshes,
                settings.cool_refreshes,
            )
            for node in list(relieving):
                sample = samples.get(node)
                if sample is not None and self.moves.settling(node, sample.coverage):
                    streaks.hold(node)
                    relieving.discard(node)
            obs.REBALANCE_HOT_NODES.labels(name).set(len(relieving))
            for key in [k for k in self._reported if k[0] == name and k[1] not in relieving]:
                del self._reported[key]
            for node in sorted(relieving):
                relief = await self.plan(policy, node, now)
                if settings.mode == "Evict" and self.evictions and relief.moves:
                    if ready:  # else the warning said why nothing moves
                        await self._relieve(policy, relief, now)
                        streaks.hold(node)
                else:
                    await self._report(policy, relief)

    async def _relieve(self, policy: Policy, relief: Relief, now: float) -> None:
        """Evict the plan's pods in order; a refusal stops the rest (the node is planned
        again once it has stayed hot again)."""
        self._reported.pop((policy.name, relief.node), None)
        for move in relief.moves:
            outcome = await self.evictor.move(policy, move, relief.over, now)
            if outcome != "evicted":
                break

    async def plan(self, policy: Policy, node: str, now: float) -> Relief:
        """What relieving `node` under `policy` would move where, now (the loop and
        `loadwise explain node/NAME` both ask this)."""
        scheduler = self.scheduler
        # One basis for the whole plan: a refresh while the candidates are read (an await)
        # must not mix two sets of samples.
        basis = scheduler.usage.basis(policy, now, scheduler.rng)
        samples = basis.samples
        sample = samples.get(node)
        cache = scheduler.usage.cache_for(policy)
        if sample is None or cache is None:
            return Relief(node, refused="no sample of it from the policy's source")
        candidates, kept, shares = await self._candidates(policy, node, cache.pod_usage, now)
        # A saturated node's figure stops at 100%: what is over is judged at least by what
        # its pods are measured to use (the node's own figure, when that is higher).
        pods_use = (sum(s[1] for s in shares), sum(s[2] for s in shares))
        judged = dataclasses.replace(
            sample, cpu=max(sample.cpu, pods_use[0]), memory=max(sample.memory, pods_use[1])
        )
        candidates, cool_bands = hot_for_their_bands(
            policy, scheduler.state.nodes.get(node), judged, candidates, shares
        )
        max_moves, limit = self._moves_left(policy, node, now)
        held_back = "; ".join(filter(None, (limit, kept, cool_bands)))
        # Replacements that have room held but are not placed yet count on their targets, as
        # placed pods do (their estimates), so a second hot node's plan does not pile onto one.
        view = scheduler.state
        # Not started at all: all of each one's estimate is still to come (placed now).
        held = [
            dataclasses.replace(p, node_name=p.nominated_node, nominated_node="", assumed=True,
                                placed_at=now)
            for p in self.moves.held()
            if p.nominated_node in view.nodes
        ]  # fmt: skip
        moved: dict[str, tuple[int, int]] = {}
        for record in self.moves:
            if record.reserve_until > now and record.used != (0, 0):
                cpu, memory = moved.get(record.workload, (0, 0))
                moved[record.workload] = (max(cpu, record.used[0]), max(memory, record.used[1]))
        # Replacements that took their room but whose use their target's sample does not show
        # in full yet (not Ready, or Ready after what the sample covers): counted in full, as
        # if placed now. The scorer's share by placement time would count too little of a pod
        # that starts using late, and a second move onto that target could turn it hot.
        arriving = self._arriving(samples)
        for pod in arriving:
            view.set_aside(pod.uid)
        for pod in (*held, *(dataclasses.replace(p, placed_at=now) for p in arriving)):
            view.put_back(pod, placed=True)
        try:
            limits = Limits(max_moves, held_back, moved)
            bands = policy.spec.priority_bands

            def basis_for(pod: PodInfo) -> Basis:
                return scheduler.usage.basis(policy, now, scheduler.rng, pod.priority)

            return plan_relief(
                node, judged, candidates, view, basis, scheduler.profile, limits,
                basis_for if bands else None,
            )  # fmt: skip
        finally:
            for pod in (*held, *arriving):
                view.set_aside(pod.uid)
            for pod in arriving:
                view.put_back(pod, placed=True)

    def _arriving(self, samples: Mapping[str, NodeSample]) -> list[PodInfo]:
        """Replacements on their targets whose use the target's sample does not cover yet."""
        out = []
        for record in self.moves:
            pod = self.scheduler.state.pods.get(record.claimed_by) if record.claimed_by else None
            if pod is None or pod.node_name != record.target or pod.assumed:
                continue  # an assumed pod is placed now: its estimate counts in full already
            sample = samples.get(record.target)
            if not pod.ready_at or sample is None or sample.coverage < pod.ready_at:
                out.append(pod)
        return out

    def _moves_left(self, policy: Policy, node: str, now: float) -> tuple[int, str]:
        """How many evictions the node and cluster limits leave now, and which limit binds."""
        limits = policy.spec.rebalance.limits
        from_node = limits.per_node_per_hour - self.moves.count(now - 3600, source=node)
        cluster = limits.cluster_per_minute - self.moves.count(now - 60)
        if from_node <= cluster:
            return max(0, from_node), f"limits.perNodePerHour leaves {max(0, from_node)}"
        return max(0, cluster), f"limits.clusterPerMinute leaves {max(0, cluster)}"

    def _kept_back(self, policy: Policy, pod: PodInfo, now: float) -> str | None:
        """Why the limits or a disruption budget keep this pod from moving now, or None."""
        limits = policy.spec.rebalance.limits
        hour = now - 3600
        if self.moves.count(hour, namespace=pod.namespace) >= limits.per_namespace_per_hour:
            return "limits.perNamespacePerHour"
        if pod.workload and self.moves.count(hour, workload=pod.workload) >= (
            limits.per_workload_per_hour
        ):
            return "limits.perWorkloadPerHour"
        if self.evictor.is_blocked(pod.uid, now):
            return "its PodDisruptionBudget refused an eviction lately"
        budgets = self.scheduler.preemption.budgets.values()
        if budgets and split_violating([pod], budgets)[0]:
            return "its PodDisruptionBudget allows no disruption now"
        return None

    async def _candidates(
        self,
        policy: Policy,
        node: str,
        usage: Mapping[tuple[str, str], tuple[int, int]],
        now: float,
    ) -> tuple[list[Candidate], str, list[tuple[int, float, float]]]:
        """The node's pods this policy governs that may move and whose use was measured,
        parsed in full (their replacements keep their constraints); which of them the limits
        or budgets keep back now, said in a few words; and what each of its pods is measured
        to use (priority, shares of allocatable CPU and memory)."""
        scheduler = self.scheduler
        info = scheduler.state.nodes.get(node)
        if info is None:
            return [], "", []
        listed = await self.transport.get_json(
            "/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"}
        )
        alloc_cpu = info.allocatable.get(CPU) or 0
        alloc_mem = info.allocatable.get(MEMORY) or 0
        out = []
        kept: dict[str, list[str]] = {}
        shares = []
        for raw in listed.get("items") or ():
            meta = raw.get("metadata") or {}
            used = usage.get((meta.get("namespace", ""), meta.get("name", "")))
            if used is not None and not is_terminal(raw) and alloc_cpu and alloc_mem:
                priority = (raw.get("spec") or {}).get("priority")
                priority = priority if isinstance(priority, int) else 0
                shares.append((priority, used[0] / alloc_cpu, used[1] / alloc_mem))
            if ineligible(raw, scheduler.name, policy.spec.rebalance.allow_local_storage):
                continue
            pod = parse_pod(raw)
            namespace_labels = scheduler.state.namespaces.get(pod.namespace, {})
            governing = scheduler.policies.for_pod(pod.labels, namespace_labels, scheduler.name)
            if governing.name != policy.name or used is None or not alloc_cpu or not alloc_mem:
                continue
            why = self._kept_back(policy, pod, now)
            if why is not None:
                kept.setdefault(why, []).append(pod.key)
                continue
            qos = str((raw.get("status") or {}).get("qosClass") or "Burstable")
            grace = (raw.get("spec") or {}).get("terminationGracePeriodSeconds")
            grace = float(grace) if isinstance(grace, int | float) else 30.0
            out.append(Candidate(pod, qos, used[0] / alloc_cpu, used[1] / alloc_mem, grace, used))
        said = "; ".join(f"{why} keeps {', '.join(pods)}" for why, pods in kept.items())
        return out, said, shares

    async def _report(self, policy: Policy, relief: Relief) -> None:
        """Say each plan once, not at every refresh: a changed plan is said again."""
        said = (
            "; ".join(f"{m.pod.key}->{m.target}" for m in relief.moves)
            if relief.moves
            else relief.refused
        )
        key = (policy.name, relief.node)
        if self._reported.get(key) == said:
            return
        self._reported[key] = said
        over = ", ".join(f"{r} {share:.0%} over" for r, share in relief.over.items())
        if not relief.moves:
            log.info(
                "node %s stays hot under policy %s (%s) and nothing moves: %s",
                relief.node,
                policy.name,
                over,
                relief.refused,
            )
            return
        for move in relief.moves:
            chosen = move.decision.chosen
            message = (
                f"would evict from {move.source} to relieve it ({over} its hot thresholds for "
                f"{policy.spec.rebalance.hot_refreshes} refreshes): a replacement would go to "
                f"{move.target} (cpu {chosen.cpu:.0%} mem {chosen.memory:.0%} with it); policy "
                f"{policy.name}, {self._dry_run(policy)}"
            )
            log.info("%s %s", move.pod.key, message, extra=_fields(move.pod.key, move.source))
            obs.REBALANCE_WOULD_EVICT.labels(policy.name).inc()
            await self.binder.event(move.pod, "Normal", "WouldEvict", message)

    def _dry_run(self, policy: Policy) -> str:
        if policy.spec.rebalance.mode == "Evict" and not self.evictions:
            return "dry run: the operator may not evict (its rebalance_evictions setting)"
        return "dry run"


def _drop_gauge(policy: str) -> None:
    with contextlib.suppress(KeyError):  # never set: nothing to remove
        obs.REBALANCE_HOT_NODES.remove(policy)


def _fields(pod: str, node: str) -> dict[str, Any]:
    return {"pod": pod, "node": node}


def hot_for_their_bands(
    policy: Policy,
    node: NodeInfo | None,
    judged: NodeSample,
    candidates: list[Candidate],
    shares: list[tuple[int, float, float]],
) -> tuple[list[Candidate], str]:
    """The candidates the node is hot for, by their priority bands (heat.hot_for: what
    placement would allow there, rebalancing does not undo), and which it keeps, in words."""
    bands = policy.spec.priority_bands
    if not bands:
        return candidates, ""
    out, cool = [], []
    for candidate in candidates:
        band = band_of(bands, candidate.pod.priority)
        if band is None or hot_for(policy, judged, node, band, shares):
            out.append(candidate)
        else:
            cool.append(candidate.pod.key)
    said = f"not hot for their priority band: {', '.join(cool)}" if cool else ""
    return out, said
