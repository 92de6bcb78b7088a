"""Rebalancer: the leader's look, after each metrics refresh, at nodes that stay hot under a
policy with `spec.rebalance.enabled`, and what it would move where (framework/rebalance.py
plans it with the scheduling cycle). Dry run only: each planned move is a `WouldEvict` event
on the pod, a log line and a count; nothing is evicted yet.

Nothing here raises into its loop: a failed pass is logged and the next refresh tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from .. import observability as obs
from ..framework.rebalance import (
    Candidate,
    HotStreaks,
    Relief,
    hot_node_names,
    ineligible,
    plan_relief,
)
from ..framework.types import parse_pod
from ..kube.transport import Http
from ..policies.policy import Policy
from ..resources import CPU, MEMORY
from .binder import Binder
from .scheduler import Scheduler

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(self, transport: Http, binder: Binder, scheduler: Scheduler) -> None:
        self.transport = transport
        self.binder = binder
        self.scheduler = scheduler
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
        """A new leader counts streaks afresh: its predecessor's are not known to it."""
        for policy in self._streaks:
            _drop_gauge(policy)
        self._streaks.clear()
        self._seen_refresh.clear()
        self._reported.clear()

    async def run_once(self, now: float) -> None:
        scheduler = self.scheduler
        enabled = {p.name: p for p in scheduler.policies.policies() if p.spec.rebalance.enabled}
        for name in set(self._streaks) - set(enabled):
            _drop_gauge(name)
            del self._streaks[name]
            self._seen_refresh.pop(name, None)
        for name, policy in enabled.items():
            cache = scheduler.caches.get(policy.spec.metrics.source)
            if cache is None or self._seen_refresh.get(name) == cache.refreshes:
                continue  # streaks count refreshes, not passes
            self._seen_refresh[name] = cache.refreshes
            samples = scheduler.samples_for(policy)
            nodes = scheduler.state.nodes
            settings = policy.spec.rebalance
            streaks = self._streaks.setdefault(name, HotStreaks())
            relieving = streaks.update(
                hot_node_names(policy, samples, nodes, now),
                nodes,
                settings.hot_refreshes,
                settings.cool_refreshes,
            )
            obs.REBALANCE_HOT_NODES.labels(name).set(len(relieving))
            for key in [k for k in self._reported if k[0] == name and k[1] not in relieving]:
                del self._reported[key]
            for node in sorted(relieving):
                await self._report(policy, await self.plan(policy, node, now))

    async def plan(self, policy: Policy, node: str, now: float) -> Relief:
        """What relieving `node` under `policy` would move where, now (the loop and
        `loadwise explain node/NAME` both ask this)."""
        scheduler = self.scheduler
        samples = scheduler.samples_for(policy)
        sample = samples.get(node)
        cache = scheduler.caches.get(policy.spec.metrics.source)
        if sample is None or cache is None:
            return Relief(node, refused="no sample of it from the policy's source")
        return plan_relief(
            node,
            sample,
            await self._candidates(policy, node, cache.pod_usage),
            scheduler.state,
            policy,
            samples,
            now,
            scheduler.rng,
            scheduler.profile,
            scheduler.learned_for(policy),
        )

    async def _candidates(
        self, policy: Policy, node: str, usage: Mapping[tuple[str, str], tuple[int, int]]
    ) -> list[Candidate]:
        """The node's pods this policy governs that may move and whose use was measured,
        parsed in full (their replacements keep their constraints)."""
        scheduler = self.scheduler
        info = scheduler.state.nodes.get(node)
        if info is None:
            return []
        listed = await self.transport.get_json(
            "/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"}
        )
        alloc_cpu = info.allocatable.get(CPU) or 0
        alloc_mem = info.allocatable.get(MEMORY) or 0
        out = []
        for raw in listed.get("items") or ():
            if ineligible(raw, scheduler.name, policy.spec.rebalance.allow_local_storage):
                continue
            pod = parse_pod(raw)
            namespace_labels = scheduler.state.namespaces.get(pod.namespace, {})
            governing = scheduler.policies.for_pod(pod.labels, namespace_labels, scheduler.name)
            used = usage.get((pod.namespace, pod.name))
            if governing.name != policy.name or used is None or not alloc_cpu or not alloc_mem:
                continue
            qos = str((raw.get("status") or {}).get("qosClass") or "Burstable")
            out.append(Candidate(pod, qos, used[0] / alloc_cpu, used[1] / alloc_mem))
        return out

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
                f"{policy.name}, dry run"
            )
            log.info("%s %s", move.pod.key, message, extra=_fields(move.pod.key, move.source))
            obs.REBALANCE_WOULD_EVICT.labels(policy.name).inc()
            await self.binder.event(move.pod, "Normal", "WouldEvict", message)


def _drop_gauge(policy: str) -> None:
    with contextlib.suppress(KeyError):  # never set: nothing to remove
        obs.REBALANCE_HOT_NODES.remove(policy)


def _fields(pod: str, node: str) -> dict[str, Any]:
    return {"pod": pod, "node": node}
