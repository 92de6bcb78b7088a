"""Soft taints against a stand-in API server that keeps nodes as one does (updates conditional on
the resourceVersion): a node hot at enough refreshes in a row gets loadwise.io/hot:
PreferNoSchedule beside its other taints, keeps it until cool long enough (no flapping), a new
leader adopts it, a taint of our key written by someone else is left alone, and `untaint_all`
removes ours only."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.scheduler.soft_taints import SoftTaints, untaint_all
from loadwise.usage.cache import MetricsCache, NodeSample
from loadwise_dev import manifests

from ...fakes import FakeTransport, Reply

NAME = "loadwise-scheduler"
OURS = {"key": "loadwise.io/hot", "value": "true", "effect": "PreferNoSchedule"}
THEIRS = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


class Source:
    name = "prometheus"

    async def fetch(self) -> dict[str, NodeSample]:
        return {}


class Cluster:
    def __init__(self) -> None:
        self.fake = FakeTransport(self.handle)
        self.version = 10
        self.nodes: dict[str, dict[str, Any]] = {}
        self.cache = MetricsCache(Source(), 10.0)
        self.scheduler = Scheduler(
            NAME, Binder(self.fake, NAME), {"prometheus": self.cache}, SchedulingQueue()
        )
        for name in ("a", "b"):
            raw = manifests.node(name, cpu="4")
            raw["metadata"]["resourceVersion"] = "1"
            raw["spec"]["taints"] = [dict(THEIRS)]
            self.nodes[name] = raw
            self.scheduler.on_node_event("ADDED", copy.deepcopy(raw))
        self.writes = 0

    def handle(self, method: str, path: str, body: Mapping[str, Any] | None, params: Any) -> Reply:
        if path == "/api/v1/nodes":
            return 200, {"items": copy.deepcopy(list(self.nodes.values()))}
        name = path.rsplit("/", 1)[1]
        stored = self.nodes[name]
        if method == "GET":
            return 200, copy.deepcopy(stored)
        assert method == "PUT" and body is not None
        if body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            return 409, {"message": "the object has been modified"}
        self.version += 1
        self.writes += 1
        self.nodes[name] = copy.deepcopy(dict(body))
        self.nodes[name]["metadata"]["resourceVersion"] = str(self.version)
        self.scheduler.on_node_event("MODIFIED", copy.deepcopy(self.nodes[name]))  # the watch
        return 200, copy.deepcopy(self.nodes[name])

    def refresh(self, a: float) -> None:
        now = time.time()
        self.cache.samples = {"a": NodeSample(a, 0.3, now), "b": NodeSample(0.2, 0.3, now)}
        self.cache.refreshes += 1

    def taints(self, name: str) -> list[dict[str, Any]]:
        return list(self.nodes[name]["spec"].get("taints") or ())


async def test_a_node_hot_long_enough_is_soft_tainted_until_cool_long_enough() -> None:
    cluster = Cluster()
    taints = SoftTaints(cluster.scheduler, cluster.fake, hot_refreshes=2, cool_refreshes=3)
    cluster.refresh(0.95)
    await taints.run_once(time.time())
    assert cluster.taints("a") == [THEIRS]  # hot once: not yet
    await taints.run_once(time.time())  # no new refresh: not counted
    assert cluster.taints("a") == [THEIRS]
    cluster.refresh(0.95)
    await taints.run_once(time.time())
    assert cluster.taints("a") == [THEIRS, OURS]  # the other taint kept
    assert cluster.taints("b") == [THEIRS]
    for hot in (0.2, 0.95, 0.2, 0.2):  # cool, hot again, cool twice: not yet three in a row
        cluster.refresh(hot)
        await taints.run_once(time.time())
        assert cluster.taints("a") == [THEIRS, OURS]
    cluster.refresh(0.2)
    await taints.run_once(time.time())
    assert cluster.taints("a") == [THEIRS]
    assert cluster.writes == 2  # one add, one remove


async def test_a_new_leader_adopts_the_taints_it_finds() -> None:
    cluster = Cluster()
    first = SoftTaints(cluster.scheduler, cluster.fake, hot_refreshes=1, cool_refreshes=2)
    cluster.refresh(0.95)
    await first.run_once(time.time())
    assert OURS in cluster.taints("a")
    successor = SoftTaints(cluster.scheduler, cluster.fake, hot_refreshes=1, cool_refreshes=2)
    cluster.refresh(0.2)
    await successor.run_once(time.time())
    assert OURS in cluster.taints("a")  # cool once: kept, as the first leader would have
    cluster.refresh(0.2)
    await successor.run_once(time.time())
    assert OURS not in cluster.taints("a")


async def test_a_taint_of_our_key_written_by_someone_else_is_left_alone() -> None:
    cluster = Cluster()
    foreign = {"key": "loadwise.io/hot", "value": "manual", "effect": "NoSchedule"}
    cluster.nodes["a"]["spec"]["taints"].append(foreign)
    cluster.scheduler.on_node_event("MODIFIED", copy.deepcopy(cluster.nodes["a"]))
    taints = SoftTaints(cluster.scheduler, cluster.fake, hot_refreshes=1, cool_refreshes=1)
    cluster.refresh(0.95)
    await taints.run_once(time.time())
    assert cluster.taints("a") == [THEIRS, foreign]
    assert cluster.writes == 0
    assert await untaint_all(cluster.fake) == []
    assert cluster.taints("a") == [THEIRS, foreign]


async def test_untaint_removes_ours_only() -> None:
    cluster = Cluster()
    cluster.nodes["b"]["spec"]["taints"].append(dict(OURS))
    assert await untaint_all(cluster.fake) == ["b"]
    assert cluster.taints("a") == [THEIRS] and cluster.taints("b") == [THEIRS]
