"""Hot nodes every scheduler avoids (opt-in, the `soft_taints` setting): pods loadwise does not
place pile onto hot nodes too, and kube-scheduler's TaintToleration scores a node with a
`PreferNoSchedule` taint the pod does not tolerate last.

The leader keeps a `loadwise.io/hot=true:PreferNoSchedule` taint on each node that is hot under
the cluster's default policy (placement's own rule: its thresholds, a pool's, or the node's
annotation) at `soft_taint_hot_refreshes` metrics refreshes in a row, and removes it once the
node is cool at `soft_taint_cool_refreshes` in a row (hysteresis: a node at the line does not
flap). It never touches another taint and never uses NoSchedule or NoExecute; a taint of its key
with another value or effect is someone else's, said once in the log and left alone. A new
leader adopts the taints it finds: they stay until their node has been cool long enough.
Turning the setting off or uninstalling the chart removes them (its hook runs
`loadwise untaint`, `untaint_all` here); the operator's own shutdown leaves them to its
successor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from .. import observability as obs
from ..framework.heat import hot_nodes
from ..framework.rebalance import HotStreaks
from ..framework.types import NodeInfo
from ..kube.transport import Http
from ..policies.policy_set import PolicySet
from .state import ClusterState
from .usage_sources import UsageSources

log = logging.getLogger(__name__)

KEY = "loadwise.io/hot"
VALUE = "true"
EFFECT = "PreferNoSchedule"
NODES = "/api/v1/nodes"


class Scheduling(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> ClusterState: ...
    @property
    def policies(self) -> PolicySet: ...
    @property
    def usage(self) -> UsageSources: ...


def tainted(node: NodeInfo) -> bool:
    """The node carries our taint, as we write it."""
    return any(t.key == KEY and t.value == VALUE and t.effect == EFFECT for t in node.taints)


class SoftTaints:
    def __init__(
        self, scheduler: Scheduling, transport: Http, hot_refreshes: int, cool_refreshes: int
    ) -> None:
        self.scheduler = scheduler
        self.transport = transport
        self.hot_refreshes, self.cool_refreshes = hot_refreshes, cool_refreshes
        self._streaks = HotStreaks()
        self._adopted = False
        self._seen_refresh = -1
        self._foreign: set[str] = set()  # nodes whose taint of our key is someone else's

    async def run(self, interval: float) -> None:
        """Until cancelled, when this replica stops leading."""
        try:
            while True:
                try:
                    await self.run_once(time.time())
                except Exception:  # a bug must cost one pass, never the loop
                    log.exception("soft taints pass failed; trying again in %.0fs", interval)
                await asyncio.sleep(interval)
        finally:
            self.forget()

    def forget(self) -> None:
        """A new term counts streaks afresh, and adopts the taints it finds."""
        self._streaks = HotStreaks()
        self._adopted = False
        self._seen_refresh = -1

    async def run_once(self, now: float) -> None:
        scheduler = self.scheduler
        policy = scheduler.policies.for_pod({}, {}, scheduler.name)  # the cluster default
        cache = scheduler.usage.cache_for(policy)
        if cache is None or cache.refreshes == self._seen_refresh:
            return  # streaks count refreshes, not passes
        self._seen_refresh = cache.refreshes
        nodes = scheduler.state.nodes
        ours = {name for name, node in nodes.items() if tainted(node)}
        if not self._adopted:
            self._streaks.relieving.update(ours)
            self._adopted = True
        hot = hot_nodes(policy, scheduler.usage.samples_for(policy), nodes, now)
        wanted = self._streaks.update(hot, nodes, self.hot_refreshes, self.cool_refreshes)
        obs.SOFT_TAINTED_NODES.set(len(wanted))
        for name in sorted(wanted - ours):
            await self._write(name, True)
        for name in sorted(ours - wanted):
            await self._write(name, False)

    async def _write(self, name: str, on: bool) -> None:
        """Our taint added to or removed from the node, every other taint as it is; a conflict
        or an error leaves it to the next pass."""
        try:
            outcome = await set_taint(self.transport, name, on)
        except Exception as exc:
            log.warning("soft taint on %s not %s: %r", name, "added" if on else "removed", exc)
            return
        if outcome == "foreign":
            if name not in self._foreign:
                self._foreign.add(name)
                log.warning(
                    "node %s has a taint of key %s that loadwise did not write (another value or "
                    "effect): left alone, and the node not soft-tainted",
                    name,
                    KEY,
                )
            return
        self._foreign.discard(name)
        if outcome == "written":
            obs.SOFT_TAINT_WRITES.labels("add" if on else "remove").inc()
            log.info("node %s %s", name, "hot: soft-tainted" if on else "cool: soft taint removed")


async def set_taint(transport: Http, name: str, on: bool) -> str:
    """ "written", "unchanged", "foreign" (a taint of our key not ours), "gone" or "conflict"."""
    code, data = await transport.request("GET", f"{NODES}/{name}")
    if code == 404:
        return "gone"
    if code >= 300:
        raise RuntimeError(f"GET node {name}: HTTP {code}")
    raw: dict[str, Any] = orjson.loads(data)
    spec = raw.setdefault("spec", {})
    taints: list[Mapping[str, Any]] = list(spec.get("taints") or ())
    mine = [t for t in taints if t.get("key") == KEY]
    if any(t.get("value") != VALUE or t.get("effect") != EFFECT for t in mine):
        return "foreign"
    if bool(mine) == on:
        return "unchanged"
    others = [t for t in taints if t.get("key") != KEY]
    spec["taints"] = [*others, {"key": KEY, "value": VALUE, "effect": EFFECT}] if on else others
    code, data = await transport.request("PUT", f"{NODES}/{name}", raw)  # resourceVersion kept
    if code == 409:
        return "conflict"
    if code == 404:
        return "gone"
    if code >= 300:
        raise RuntimeError(f"update node {name}: HTTP {code} {data[:200]!r}")
    return "written"


async def untaint_all(transport: Http) -> list[str]:
    """Our taint removed from every node (turned off, uninstalled); the nodes it was on."""
    code, data = await transport.request("GET", NODES)
    if code >= 300:
        raise RuntimeError(f"list nodes: HTTP {code}")
    removed = []
    for item in orjson.loads(data).get("items") or ():
        name = str((item.get("metadata") or {}).get("name") or "")
        taints = (item.get("spec") or {}).get("taints") or ()
        if not any(t.get("key") == KEY for t in taints):
            continue
        for _ in range(5):  # a conflict: read again
            outcome = await set_taint(transport, name, False)
            if outcome != "conflict":
                break
        if outcome == "written":
            removed.append(name)
        elif outcome == "foreign":
            log.warning("node %s: a taint of key %s not written by loadwise, left alone", name, KEY)
    return removed
