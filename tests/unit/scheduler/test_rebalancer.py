"""The rebalancer against a stand-in API. Dry run: a node hot at enough refreshes in a row gets
its plan said once, as WouldEvict events on the pods it would move; nothing is evicted. Evict:
the ledger is saved before the Eviction is posted, the room on the target is held and the
workload kept off the source; a budget's 429 moves nothing; the limits hold; a new leader reads
the ledger and settles an eviction left in flight."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY

from loadwise.framework.types import Owner, parse_pod
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.rebalancing.move_store import MoveStore
from loadwise.scheduler.rebalancing.moves import EVICTED, EVICTING, MoveRecord
from loadwise.scheduler.rebalancing.rebalancer import Rebalancer
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


LEDGER = "/api/v1/namespaces/default/configmaps/loadwise-scheduler-rebalance"


class Setup:
    def __init__(self, ledger: dict[str, Any] | None = None, eviction_status: int = 201) -> None:
        self.pods = [running("tm-1", "hot"), running("tm-2", "hot")]
        self.ledger = ledger if ledger is not None else {}  # the ConfigMap, shared by "leaders"
        self.eviction_status = eviction_status
        self.fake = FakeTransport(self.handle)
        self.cache = MetricsCache(Source(), 10.0)
        binder = Binder(self.fake, NAME)
        self.scheduler = Scheduler(NAME, binder, {"prometheus": self.cache}, SchedulingQueue())
        for node in ("hot", "cool"):
            self.scheduler.on_node_event("ADDED", manifests.node(node, cpu="4"))
        for raw in self.pods:
            self.scheduler.state.observe_bound(parse_pod(raw, placed=True), terminal=False)
        store = MoveStore(self.fake, "default", "loadwise-scheduler-rebalance")
        self.rebalancer = Rebalancer(self.fake, binder, self.scheduler, store, evictions=True)

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
        if path == LEDGER or path.endswith("/configmaps"):
            return self.configmap(method, body)
        if path.endswith("/eviction"):
            if self.eviction_status < 300:
                name = path.split("/")[-2]
                self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
            return self.eviction_status, {}
        if method == "GET" and path.startswith("/api/v1/namespaces/default/pods/"):
            name = path.rsplit("/", 1)[1]
            found = [p for p in self.pods if p["metadata"]["name"] == name]
            return (200, found[0]) if found else (404, {})
        return (201 if method == "POST" else 200), {}

    def configmap(self, method: str, body: Mapping[str, Any] | None) -> Reply:
        """The ConfigMap as the API server keeps it: create once, update at its version."""
        saved = self.ledger.get("object")
        if method == "GET":
            return (200, saved) if saved else (404, {})
        assert body is not None
        version = body["metadata"].get("resourceVersion")
        if (method == "POST" and saved) or (
            method == "PUT" and (not saved or version != saved["metadata"]["resourceVersion"])
        ):
            return 409, {}
        number = int(saved["metadata"]["resourceVersion"]) + 1 if saved else 1
        stored = json.loads(json.dumps(body))
        stored["metadata"]["resourceVersion"] = str(number)
        self.ledger["object"] = stored
        return (201 if method == "POST" else 200), stored

    def saved_moves(self) -> list[dict[str, Any]]:
        return list(json.loads(self.ledger["object"]["data"]["moves.json"]))

    def refresh(self, hot: float, at: float | None = None) -> None:
        now = time.time() if at is None else at
        self.cache.samples = {"hot": NodeSample(hot, 0.3, now), "cool": NodeSample(0.2, 0.3, now)}
        self.cache.pod_usage = {("default", "tm-1"): (1200, 2**28), ("default", "tm-2"): (100, 0)}
        self.cache.refreshes += 1

    def would_evict(self) -> list[Any]:
        return self.events("WouldEvict")

    def events(self, reason: str) -> list[Any]:
        return [
            c.body
            for c in self.fake.requests("POST", "/events")
            if c.body is not None and c.body["reason"] == reason
        ]

    def evict_policy(self, **rebalance: Any) -> None:
        settings = {"enabled": True, "mode": "Evict", "hotRefreshes": 2, **rebalance}
        spec = {"podSelector": {"matchLabels": {"app": "flink"}}, "rebalance": settings}
        self.scheduler.policies.apply("flink", spec)

    async def hot_for(self, refreshes: int, hot: float = 0.95) -> None:
        for _ in range(refreshes):
            self.refresh(hot)
            await self.rebalancer.run_once(time.time())
        await self.scheduler.events.flush()


def would_evict_count(policy: str) -> float:
    return (
        REGISTRY.get_sample_value("loadwise_rebalance_would_evict_total", {"policy": policy}) or 0
    )


async def test_a_node_hot_two_refreshes_in_a_row_gets_its_plan_said_once() -> None:
    setup = Setup()
    setup.scheduler.policies.apply(
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
    setup.scheduler.policies.apply("plain", {"podSelector": {"matchLabels": {"app": "flink"}}})
    for _ in range(5):
        setup.refresh(hot=0.99)
        await setup.rebalancer.run_once(time.time())
    assert setup.would_evict() == [] and not setup.fake.requests("GET", "/api/v1/pods")


def flink(setup: Setup) -> Any:
    (policy,) = [p for p in setup.scheduler.policies.policies() if p.name == "flink"]
    return policy


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0


async def test_evict_saves_the_ledger_first_then_evicts_and_holds_room_off_the_source() -> None:
    setup = Setup()
    setup.pods[0]["spec"]["terminationGracePeriodSeconds"] = 30
    setup.evict_policy()
    before = counter("loadwise_rebalance_evictions_total", policy="flink", reason="cpu")
    await setup.hot_for(2)
    calls = [(c.method, c.path) for c in setup.fake.calls]
    evicted = ("POST", "/api/v1/namespaces/default/pods/tm-1/eviction")
    assert evicted in calls and ("POST", "/api/v1/namespaces/default/configmaps") in calls
    assert calls.index(("POST", "/api/v1/namespaces/default/configmaps")) < calls.index(evicted)
    (call,) = setup.fake.requests("POST", "/eviction")
    assert (
        call.body is not None and call.body["deleteOptions"]["preconditions"]["uid"] == "uid-tm-1"
    )
    (saved,) = setup.saved_moves()
    assert (saved["name"], saved["source"], saved["target"], saved["state"]) == (
        "tm-1", "hot", "cool", EVICTED
    )  # fmt: skip
    assert counter("loadwise_rebalance_evictions_total", policy="flink", reason="cpu") == before + 1
    scheduler = setup.scheduler
    assert set(scheduler.state.moved_off["rs"]) == {"hot"}  # its workload stays off the source
    (held,) = scheduler.preemption.nominated.values()  # the room on the target
    assert (held.uid, held.nominated_node) == ("uid-tm-1/replacement", "cool")
    (on_pod,) = setup.events("Rebalanced")[:1]
    assert on_pod["involvedObject"]["name"] == "tm-1"
    assert on_pod["message"].startswith("evicted from hot to relieve it (cpu 15% over")
    nodes = {e["involvedObject"]["name"] for e in setup.events("Rebalanced")[1:]}
    assert nodes == {"hot", "cool"}
    # Its replacement (the ReplicaSet's next pod) takes the room; then the room is no longer held.
    replacement = parse_pod(owned_by_replicaset(manifests.pod("tm-3", labels={"app": "flink"})))
    assert scheduler.moves.claim(replacement, time.time()) == "cool"
    assert not scheduler.preemption.nominated
    # The node is judged hot again only once its samples no longer include the evicted pod.
    await setup.hot_for(3)
    assert len(setup.fake.requests("POST", "/eviction")) == 1
    assert setup.rebalancer.moves.settling("hot", time.time())
    assert REGISTRY.get_sample_value("loadwise_rebalance_hot_nodes", {"policy": "flink"}) == 0


async def test_a_budget_that_refuses_moves_nothing_and_is_asked_again_later() -> None:
    setup = Setup(eviction_status=429)
    setup.evict_policy()
    before = counter(
        "loadwise_rebalance_evictions_refused_total", policy="flink", reason="disruption-budget"
    )
    await setup.hot_for(2)
    assert len(setup.fake.requests("POST", "/eviction")) == 1
    assert setup.saved_moves() == []  # recorded before, dropped after the refusal
    assert not setup.scheduler.state.moved_off and not setup.scheduler.preemption.nominated
    (event,) = setup.events("EvictionBlocked")
    assert "PodDisruptionBudget allows no disruption now" in event["message"]
    assert (
        counter(
            "loadwise_rebalance_evictions_refused_total", policy="flink", reason="disruption-budget"
        )
        == before + 1
    )
    await setup.hot_for(3)  # within a minute: tm-1 is not asked again, tm-2 alone cannot do it
    assert len(setup.fake.requests("POST", "/eviction")) == 1
    relief = await setup.rebalancer.plan(flink(setup), "hot", time.time())
    assert "its PodDisruptionBudget refused an eviction lately keeps default/tm-1" in relief.refused


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ({"perNodePerHour": 0}, "limits.perNodePerHour leaves 0"),
        ({"clusterPerMinute": 0}, "limits.clusterPerMinute leaves 0"),
        ({"perWorkloadPerHour": 0}, "limits.perWorkloadPerHour keeps default/tm-1, default/tm-2"),
        ({"perNamespacePerHour": 0}, "limits.perNamespacePerHour keeps default/tm-1"),
    ],
)
async def test_the_limits_hold_and_say_which(limits: dict[str, int], said: str) -> None:
    setup = Setup()
    setup.evict_policy(limits=limits)
    await setup.hot_for(3)
    assert not setup.fake.requests("POST", "/eviction")
    relief = await setup.rebalancer.plan(flink(setup), "hot", time.time())
    assert said in relief.refused, relief.refused


async def test_a_second_eviction_from_a_node_waits_for_the_hour_limit() -> None:
    setup = Setup()
    setup.evict_policy(limits={"perNodePerHour": 1}, coolDownSeconds=0)
    await setup.hot_for(2)
    assert len(setup.fake.requests("POST", "/eviction")) == 1
    setup.pods.append(running("tm-4", "hot"))  # the node is hot again with another pod, later
    setup.pods[-1]["metadata"]["ownerReferences"][0].update(name="rs-2", uid="rs-2")
    setup.scheduler.state.observe_bound(parse_pod(setup.pods[-1], placed=True), terminal=False)
    later = time.time() + 600  # its samples no longer include tm-1
    for _ in range(3):
        setup.refresh(0.95, at=later)
        setup.cache.pod_usage[("default", "tm-4")] = (1200, 0)
        await setup.rebalancer.run_once(later)
    assert len(setup.fake.requests("POST", "/eviction")) == 1
    relief = await setup.rebalancer.plan(flink(setup), "hot", later)
    assert "limits.perNodePerHour leaves 0" in relief.refused


async def test_a_new_leader_reads_the_ledger_and_settles_an_eviction_left_in_flight() -> None:
    first = Setup()
    first.evict_policy()
    await first.hot_for(2)
    saved = first.saved_moves()
    # The first leader had also recorded an eviction of tm-2 and died before asking for it.
    in_flight = {**saved[0], "uid": "uid-tm-2", "name": "tm-2", "state": EVICTING}
    first.ledger["object"]["data"]["moves.json"] = json.dumps([*saved, in_flight])
    second = Setup(ledger=first.ledger)
    second.pods = [p for p in second.pods if p["metadata"]["name"] != "tm-1"]  # tm-1 went
    second.evict_policy()
    second.refresh(0.5)
    await second.rebalancer.run_once(time.time())
    moves = list(second.scheduler.moves)
    assert [(m.name, m.state) for m in moves] == [("tm-1", EVICTED)]  # tm-2 still runs: dropped
    assert [m["name"] for m in second.saved_moves()] == ["tm-1"]
    assert set(second.scheduler.state.moved_off["rs"]) == {"hot"}  # not forgotten
    (held,) = second.scheduler.preemption.nominated.values()
    assert held.nominated_node == "cool"
    assert not second.fake.requests("POST", "/eviction")  # nothing repeated


async def test_nothing_is_evicted_while_the_ledger_cannot_be_read() -> None:
    setup = Setup()
    setup.evict_policy()
    original = setup.handle

    def forbidden(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        if path == LEDGER:
            return 403, {}
        return original(method, path, body, params)

    setup.fake.handler = forbidden
    await setup.hot_for(3)
    assert not setup.fake.requests("POST", "/eviction")
    assert not setup.would_evict()


async def test_evict_mode_only_reports_while_the_operator_may_not_evict() -> None:
    setup = Setup()
    setup.rebalancer.evictions = False
    setup.evict_policy()
    await setup.hot_for(2)
    assert not setup.fake.requests("POST", "/eviction") and "object" not in setup.ledger
    (event,) = setup.would_evict()
    assert event["message"].endswith(
        "policy flink, dry run: the operator may not evict (its rebalance_evictions setting)"
    )


async def test_room_held_for_a_replacement_counts_on_its_target_in_the_next_plan() -> None:
    """A move off another node left 1.5 cores held on `cool`: planning `hot` now sees cool at
    20% + 37.5% + tm-1's 1.2 cores, too much; without the hold it would take tm-1."""
    setup = Setup()
    setup.evict_policy()
    setup.refresh(0.95)
    policy = flink(setup)
    now = time.time()
    assert [m.target for m in (await setup.rebalancer.plan(policy, "hot", now)).moves] == ["cool"]
    owner = Owner("apps/v1", "ReplicaSet", "other", "other")
    setup.scheduler.moves.add(
        MoveRecord(
            uid="uid-x", namespace="default", name="x", owner=owner, policy="flink",
            source="elsewhere", target="cool", at=now, gone_by=now, reserve_until=now + 120,
            cool_until=now + 600, priority=0, requests={"cpu": 1500}, nonzero=(1500, 0),
        )
    )  # fmt: skip
    relief = await setup.rebalancer.plan(policy, "hot", now)
    assert not relief.moves and "cool" in relief.refused, relief.refused
    assert "uid-x/replacement" not in setup.scheduler.state.pods  # the view is restored


def iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


@pytest.mark.parametrize("ready", [False, True])
async def test_a_replacement_its_target_does_not_show_yet_counts_there_in_full(ready: bool) -> None:
    """A replacement that took its room on `cool` a minute ago: until `cool`'s sample covers
    it running (Ready before what the sample covers), its whole floor (1.5 cores, what its pod
    used) counts there, whatever its placement time says: cool at 20% + 37.5% + tm-1's 30% is
    too much. Once shown, the sample has it and tm-1 may go to cool."""
    setup = Setup()
    setup.evict_policy()
    setup.refresh(0.95)
    now = time.time()
    owner = Owner("apps/v1", "ReplicaSet", "other", "other")
    setup.scheduler.moves.add(
        MoveRecord(
            uid="uid-x", namespace="default", name="x", owner=owner, policy="flink",
            source="elsewhere", target="cool", at=now - 60, gone_by=now - 30,
            reserve_until=now + 60, cool_until=now + 600, priority=0, requests={"cpu": 500},
            nonzero=(500, 0), used=(1500, 0), claimed_by="uid-rep",
        )
    )  # fmt: skip
    raw = owned_by_replicaset(running("rep", "cool"), name="other")
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(now - 60)}]
    if ready:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": iso(now - 50)})
    raw["status"]["conditions"] = conditions
    setup.scheduler.state.observe_bound(parse_pod(raw, placed=True), terminal=False)
    relief = await setup.rebalancer.plan(flink(setup), "hot", now)
    if ready:
        assert [m.target for m in relief.moves] == ["cool"], relief.refused
    else:
        assert not relief.moves and "would be hot" in relief.refused, relief.refused
    assert setup.scheduler.state.pods["uid-rep"].placed_at == pytest.approx(now - 60, abs=1)


async def test_a_saturated_node_is_judged_by_what_its_pods_use() -> None:
    """The node reads 100% (a figure cannot go higher) while its four pods use 30% each: it
    is 40% over 80%, not 20%, and one pod (what the figure alone asks) would not do: two move."""
    setup = Setup()
    setup.pods += [running("tm-3", "hot"), running("tm-4", "hot")]
    for raw in setup.pods[2:]:
        setup.scheduler.state.observe_bound(parse_pod(raw, placed=True), terminal=False)
    setup.scheduler.on_node_event("ADDED", manifests.node("cool2", cpu="4"))
    setup.evict_policy()
    setup.refresh(1.0)
    now = time.time()
    setup.cache.samples["cool2"] = NodeSample(0.1, 0.3, now)
    setup.cache.pod_usage = {("default", f"tm-{i}"): (1200, 0) for i in range(1, 5)}
    relief = await setup.rebalancer.plan(flink(setup), "hot", now)
    assert relief.over["cpu"] == pytest.approx(0.4)
    assert len(relief.moves) == 2, relief.refused


def test_readiness_reaches_a_placed_pod_through_status_churn() -> None:
    """Status-only events take the cheap path; the time a pod turned Ready still reaches it."""
    setup = Setup()
    raw = setup.pods[0]
    assert setup.scheduler.state.pods["uid-tm-1"].ready_at == 0.0
    at = time.time() - 5
    raw["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": iso(at)}
    ]
    setup.scheduler.on_pod_event("MODIFIED", raw)
    assert setup.scheduler.state.pods["uid-tm-1"].ready_at == pytest.approx(at, abs=1)


async def test_a_node_hot_only_on_an_extra_dimension_is_said_so_not_called_cool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The one heat rule: the streak and the plan judge the same dimensions. A node hot on
    its GPU alone is hot for both; no pod's share of the GPU is measured, so the plan says that
    nothing it may move would bring the GPU down, and names the GPU as what is over."""
    setup = Setup()
    spec = {
        "podSelector": {"matchLabels": {"app": "flink"}},
        "dimensions": [{"name": "gpu", "weight": 1, "hotThreshold": 80}],
        "rebalance": {"enabled": True, "hotRefreshes": 2},
    }
    setup.scheduler.policies.apply("flink", spec)
    caplog.set_level("INFO", logger="loadwise")
    for _ in range(2):
        now = time.time()
        setup.cache.samples = {
            "hot": NodeSample(0.3, 0.3, now, extra={"gpu": 0.95}),
            "cool": NodeSample(0.2, 0.3, now, extra={"gpu": 0.1}),
        }
        setup.cache.pod_usage = {("default", "tm-1"): (1200, 2**28)}
        setup.cache.refreshes += 1
        await setup.rebalancer.run_once(now)
    (policy,) = setup.scheduler.policies.policies()
    relief = await setup.rebalancer.plan(policy, "hot", now)
    assert relief.over == pytest.approx({"gpu": 0.15})
    assert relief.moves == ()
    assert relief.refused == (
        "over its gpu threshold only, which moving pods cannot be shown to relieve: no pod's "
        "gpu use is measured (rebalancing moves pods by their CPU and memory use)"
    )
    said = [r.getMessage() for r in caplog.records if "stays hot" in r.getMessage()]
    assert said == [
        "node hot stays hot under policy flink (gpu 15% over) and nothing moves: " + relief.refused
    ]
