"""The rebalancer's dry run against a stand-in API: a node hot at enough refreshes in a row gets
its plan said once, as WouldEvict events on the pods it would move; nothing is evicted."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import REGISTRY

from loadwise.framework.types import parse_pod
from loadwise.scheduler.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.rebalancer import Rebalancer
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import MetricsCache, NodeSample
from loadwise_dev import manifests

from ...fakes import FakeTransport, Reply
from ...helpers import owned_by_replicaset

NAME = "loadwise-scheduler"


class Source:
    name = "prometheus"

    async def fetch(self) -> dict[str, NodeSample]:
        return {}


def running(name: str, node: str) -> dict[str, Any]:
    raw = owned_by_replicaset(manifests.pod(name, labels={"app": "flink"}))
    raw["metadata"]["uid"] = f"uid-{name}"
    raw["spec"]["nodeName"] = node
    raw["status"] = {"phase": "Running", "qosClass": "Burstable"}
    return raw


class Setup:
    def __init__(self) -> None:
        self.pods = [running("tm-1", "hot"), running("tm-2", "hot")]
        self.fake = FakeTransport(self.handle)
        self.cache = MetricsCache(Source(), 10.0)
        binder = Binder(self.fake, NAME)
        self.scheduler = Scheduler(NAME, binder, {"prometheus": self.cache}, SchedulingQueue())
        for node in ("hot", "cool"):
            self.scheduler.on_node_event("ADDED", manifests.node(node, cpu="4"))
        for raw in self.pods:
            self.scheduler.state.observe_bound(parse_pod(raw, placed=True), terminal=False)
        self.rebalancer = Rebalancer(self.fake, binder, self.scheduler)

    def handle(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        if method == "GET" and path == "/api/v1/pods":
            node = (params or {}).get("fieldSelector", "").removeprefix("spec.nodeName=")
            return 200, {"items": [p for p in self.pods if p["spec"]["nodeName"] == node]}
        return (201 if method == "POST" else 200), {}

    def refresh(self, hot: float) -> None:
        now = time.time()
        self.cache.samples = {"hot": NodeSample(hot, 0.3, now), "cool": NodeSample(0.2, 0.3, now)}
        self.cache.pod_usage = {("default", "tm-1"): (1200, 2**28), ("default", "tm-2"): (100, 0)}
        self.cache.refreshes += 1

    def would_evict(self) -> list[Any]:
        return [
            c.body
            for c in self.fake.requests("POST", "/events")
            if c.body is not None and c.body["reason"] == "WouldEvict"
        ]


def would_evict_count(policy: str) -> float:
    return (
        REGISTRY.get_sample_value("loadwise_rebalance_would_evict_total", {"policy": policy}) or 0
    )


async def test_a_node_hot_two_refreshes_in_a_row_gets_its_plan_said_once() -> None:
    setup = Setup()
    setup.scheduler.apply_policy(
        "flink", {"podSelector": {"matchLabels": {"app": "flink"}},
                  "rebalance": {"enabled": True, "hotRefreshes": 2, "coolRefreshes": 2}},
    )  # fmt: skip
    before = would_evict_count("flink")
    setup.refresh(hot=0.95)
    await setup.rebalancer.run_once(time.time())
    await setup.rebalancer.run_once(time.time())  # the same refresh: not a second streak step
    assert setup.would_evict() == []
    setup.refresh(hot=0.95)
    await setup.rebalancer.run_once(time.time())
    await setup.scheduler.events.flush()
    (event,) = setup.would_evict()
    # tm-1 uses 30% of the node: alone it brings 95% under 80%; it would go to the cool node
    assert event["involvedObject"]["name"] == "tm-1"
    assert event["message"].startswith(
        "would evict from hot to relieve it (cpu 15% over its hot thresholds for 2 refreshes): "
        "a replacement would go to cool"
    )
    assert event["message"].endswith("policy flink, dry run")
    assert would_evict_count("flink") == before + 1
    assert REGISTRY.get_sample_value("loadwise_rebalance_hot_nodes", {"policy": "flink"}) == 1
    setup.refresh(hot=0.95)
    await setup.rebalancer.run_once(time.time())
    assert len(setup.would_evict()) == 1  # the same plan is not said again
    assert not setup.fake.requests("POST", "/eviction")  # a dry run evicts nothing
    for _ in range(2):
        setup.refresh(hot=0.5)
        await setup.rebalancer.run_once(time.time())
    assert REGISTRY.get_sample_value("loadwise_rebalance_hot_nodes", {"policy": "flink"}) == 0


async def test_off_by_default() -> None:
    setup = Setup()
    setup.scheduler.apply_policy("plain", {"podSelector": {"matchLabels": {"app": "flink"}}})
    for _ in range(5):
        setup.refresh(hot=0.99)
        await setup.rebalancer.run_once(time.time())
    assert setup.would_evict() == [] and not setup.fake.requests("GET", "/api/v1/pods")
