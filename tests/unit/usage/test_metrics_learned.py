"""LearnedUsage (per-workload usage from per-pod metrics), the cache feeding it, the Prometheus
source's pod request (its failure costs the learning only), and the runtime's pod lookup."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from loadwise.components import workload_lookup
from loadwise.scheduler.state import ClusterState
from loadwise.usage import learned as learned_module
from loadwise.usage.cache import MetricsCache, NodeSample, PodUsage
from loadwise.usage.learned import MIN_RATIO_PODS, LearnedUsage, PodFacts
from loadwise.usage.prometheus import PrometheusSource
from loadwise.usage.prometheus_settings import PrometheusSettings
from loadwise_dev import manifests

from ...helpers import prometheus_answering

NOW = 10_000.0
WEB = "ns/Deployment/web"


def owned(placed: dict[tuple[str, str], tuple[str, float]]) -> Callable[[str, str], Any]:
    """Pods of workloads, without requests (so no namespace ratio is learned from them)."""

    def facts(namespace: str, name: str) -> PodFacts | None:
        found = placed.get((namespace, name))
        return None if found is None else PodFacts(found[0], found[1], 0, 0)

    return facts


def test_estimate_is_a_high_percentile_across_the_workloads_pods() -> None:
    learned = LearnedUsage()
    assert learned.estimate(WEB) is None and learned.workloads == 0
    usage = {("ns", f"web-{i}"): (100 * (i + 1), (i + 1) << 20) for i in range(10)}
    placed = {pod: (WEB, 0.0) for pod in usage}
    learned.observe(usage, owned(placed), NOW, 60.0)
    assert learned.estimate(WEB) == (800, 8 << 20)  # 80th of 100..1000: not the runaway 1000
    assert learned.workloads == 1 and learned.estimate("ns/Deployment/other") is None
    learned.observe({("ns", "web-0"): (5000, 1 << 30)}, owned(placed), NOW + 10, 60.0)
    assert learned.estimate(WEB) == (900, 9 << 20)  # a spike in one pod moves it one rank
    one = LearnedUsage()
    one.observe({("ns", "web-0"): (123, 456)}, owned(placed), NOW, 60.0)
    assert one.estimate(WEB) == (123, 456)


def test_a_policy_judging_over_a_window_estimates_each_pod_by_its_peaks() -> None:
    """A TaskManager idling between bursts: by its latest figure it looks small; by p95 or max
    over the window (the policy's aggregation) it is what its bursts need. Figures older than
    the window, and all history while no policy asks for a window, are not kept."""
    learned = LearnedUsage()
    learned.keep = 600.0
    placed = {("ns", f"web-{i}"): (WEB, 0.0) for i in range(2)}
    for step, cpu in enumerate((100, 1200, 100, 100, 1300, 100)):
        usage = {("ns", "web-0"): (cpu, 1 << 20), ("ns", "web-1"): (cpu // 2, 1 << 20)}
        learned.observe(usage, owned(placed), NOW + 10 * step, 60.0)
    assert learned.estimate(WEB) == (100, 1 << 20)  # latest
    assert learned.over("max", 600).estimate(WEB) == (1300, 1 << 20)
    assert 1200 < learned.over("p95", 600).estimate(WEB)[0] < 1300  # type: ignore[index]
    assert learned.over("max", 25).estimate(WEB) == (1300, 1 << 20)  # the last three refreshes
    assert learned.over("max", 5).estimate(WEB) == (100, 1 << 20)  # the last alone: idle
    view = learned.over("max", 600)
    assert learned.over("max", 600) is view  # one view per refresh (the score index's key)
    learned.observe({("ns", "web-0"): (100, 1 << 20)}, owned(placed), NOW + 700, 60.0)
    assert learned.over("max", 600) is not view
    assert learned.over("max", 600).estimate(WEB) == (100, 1 << 20)  # the bursts aged out
    learned.keep = 0.0
    learned.observe({("ns", "web-0"): (100, 1 << 20)}, owned(placed), NOW + 710, 60.0)
    assert all(not w.past for w in learned._workloads.values())


def test_new_unknown_and_ownerless_pods_are_not_learned() -> None:
    learned = LearnedUsage()
    placed = {("ns", "new"): (WEB, NOW - 30.0), ("ns", "old"): ("ns/StatefulSet/db", NOW - 90.0)}
    usage = {("ns", "new"): (10, 10), ("ns", "old"): (20, 20), ("ns", "bare"): (30, 30)}
    learned.observe(usage, owned(placed), NOW, 60.0)
    assert learned.estimate(WEB) is None  # placed 30 s ago: its rate window is partly empty
    assert learned.estimate("ns/StatefulSet/db") == (20, 20) and learned.workloads == 1
    learned.observe(usage, owned(placed), NOW + 31, 60.0)
    assert learned.estimate(WEB) == (10, 10)  # old enough now


def test_gone_pods_and_idle_workloads_are_forgotten() -> None:
    learned = LearnedUsage()
    placed = {("ns", "a"): (WEB, 0.0), ("ns", "b"): (WEB, 0.0)}
    learned.observe({("ns", "a"): (100, 1), ("ns", "b"): (900, 9)}, owned(placed), NOW, 0.0)
    assert learned.estimate(WEB) == (900, 9)
    now = NOW
    for _ in range(learned_module.FORGET_REFRESHES):  # b ended; a keeps running
        now += 10
        learned.observe({("ns", "a"): (100, 1)}, owned(placed), now, 0.0)
    assert learned.estimate(WEB) == (100, 1)
    for _ in range(learned_module.FORGET_REFRESHES):  # scaled to zero: the estimate stays
        now += 10
        learned.observe({}, owned(placed), now, 0.0)
    assert learned.estimate(WEB) == (100, 1) and learned.workloads == 1
    learned.observe({}, owned(placed), now + learned_module.WORKLOAD_TTL + 1, 0.0)
    assert learned.estimate(WEB) is None and learned.workloads == 0


def test_workloads_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learned_module, "MAX_WORKLOADS", 3)
    learned = LearnedUsage()
    for i in range(5):
        pod = ("ns", f"p{i}")
        learned.observe({pod: (i, i)}, owned({pod: (f"ns/Job/j{i}", 0.0)}), NOW + i, 0.0)
    assert learned.workloads == 3
    assert learned.estimate("ns/Job/j0") is None and learned.estimate("ns/Job/j4") == (4, 4)


class PodSource:
    name = "fake"

    def __init__(self) -> None:
        self.pods: PodUsage | Exception = {("ns", "a"): (100, 1)}
        self.nodes: dict[str, NodeSample] | Exception = {"n": NodeSample(0.5, 0.5, NOW)}

    async def fetch(self) -> dict[str, NodeSample]:
        if isinstance(self.nodes, Exception):
            raise self.nodes
        return self.nodes

    async def fetch_pods(self) -> PodUsage:
        await asyncio.sleep(0)
        if isinstance(self.pods, Exception):
            raise self.pods
        return self.pods


async def test_the_cache_learns_each_refresh_and_a_pod_failure_costs_only_the_learning() -> None:
    source = PodSource()
    cache = MetricsCache(source, 10.0, owned({("ns", "a"): (WEB, 0.0)}), 60.0)
    await cache.refresh()
    assert cache.learned.estimate(WEB) == (100, 1) and cache.pod_usage == {("ns", "a"): (100, 1)}
    source.pods = ConnectionError("refused")
    source.nodes = {"n": NodeSample(0.7, 0.5, NOW + 10)}
    await cache.refresh()
    assert cache.samples["n"].cpu == 0.7 and cache.last_error is None
    assert cache.pods_error == "ConnectionError: refused"
    source.pods, source.nodes = {("ns", "a"): (300, 3)}, TimeoutError()
    await cache.refresh()  # the node request failed; the pods answered: still learned
    assert cache.last_error == "TimeoutError" and cache.samples["n"].cpu == 0.7
    assert cache.learned.estimate(WEB) == (300, 3) and cache.pods_error is None
    unlearning = MetricsCache(source, 10.0)
    source.nodes = {}
    await unlearning.refresh()
    assert unlearning.pod_usage == {} and unlearning.learned.workloads == 0


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[PrometheusSource, dict[str, Any]]]:
    """A /api/v1/query answering node queries and, unless told to fail, pod queries."""
    answers: dict[str, Any] = {"pods_status": 200, "queries": []}

    async def query(request: web.Request) -> web.Response:
        text = (await request.post())["query"]
        assert isinstance(text, str)
        answers["queries"].append(text)
        if "namespace, pod" in text:
            if answers["pods_status"] != 200:
                return web.Response(status=answers["pods_status"], text="boom")
            result = [
                {"metric": {"namespace": "ns", "pod": "a", "loadwise_resource": r}, "value": v}
                for r, v in (("cpu", [NOW, "0.25"]), ("memory", [NOW, "1024"]))
            ]
        else:
            result = [
                {"metric": {"node": "n", "loadwise_resource": r}, "value": [NOW, v]}
                for r, v in (("cpu", "0.5"), ("memory", "0.25"), ("disk-io", "0.75"))
            ]
        return web.json_response(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        )

    async with prometheus_answering(query) as url:
        source = PrometheusSource(PrometheusSettings(url=url, dimensions={"disk-io": "D"}), lag=5)
        try:
            yield source, answers
        finally:
            await source.close()


async def test_prometheus_fetches_dimensions_and_pods_and_survives_a_pod_query_failure(
    prometheus: tuple[PrometheusSource, dict[str, Any]],
) -> None:
    source, answers = prometheus
    cache = MetricsCache(source, 10.0, owned({("ns", "a"): (WEB, 0.0)}), 60.0)
    await cache.refresh()
    assert len(answers["queries"]) == 2 and any('"disk-io"' in q for q in answers["queries"])
    assert cache.samples["n"] == NodeSample(0.5, 0.25, NOW, NOW - 5, {"disk-io": 0.75})
    assert cache.pod_usage == {("ns", "a"): (250, 1024)}
    assert cache.learned.estimate(WEB) == (250, 1024)
    answers["pods_status"] = 500
    cache.samples = {}
    await cache.refresh()
    assert "n" in cache.samples and cache.last_error is None
    assert cache.pods_error is not None and "HTTP 500" in cache.pods_error


def test_the_runtime_looks_pods_up_by_name_in_the_state() -> None:
    state = ClusterState()
    raw = manifests.pod("web-1", namespace="ns")
    raw["metadata"].update(
        uid="u1",
        ownerReferences=[
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web",
                "uid": "r",
                "controller": True,
            }
        ],
    )
    raw["spec"]["nodeName"] = "n"
    bare = manifests.pod("bare", namespace="ns")
    bare["metadata"]["uid"] = "u2"
    bare["spec"]["nodeName"] = "n"
    from loadwise.framework.types import parse_pod

    for pod in (raw, bare):
        state.observe_bound(parse_pod(pod), terminal=False)
    workload_of = workload_lookup(state, max_age=0.0)
    found = workload_of("ns", "web-1")
    assert found is not None and found.workload == "ns/ReplicaSet/web" and found.placed_at > 0
    assert (found.cpu, found.memory) == (100, 128 * 2**20)  # its requests
    bare_facts = workload_of("ns", "bare")
    assert bare_facts is not None and bare_facts.workload is None  # its namespace ratio counts it
    assert workload_of("ns", "missing") is None
    state.remove_pod("u1")
    assert workload_of("ns", "web-1") is None  # rebuilt (max_age 0): it is gone


async def test_the_per_pod_table_is_updated_in_place_to_the_new_answer() -> None:
    from loadwise.usage.cache import _drain, _update_in_steps

    table = {("ns", f"p{i}"): (i, i) for i in range(5000)}
    kept = table
    fresh = {("ns", f"p{i}"): (i + 1, i) for i in range(100, 5100)}  # 100 gone, 100 new
    await _update_in_steps(table, dict(fresh), step=300)
    assert table is kept and table == fresh
    same_size = {("ns", f"q{i}"): (1, 1) for i in range(5000)}  # all replaced, equal count
    await _update_in_steps(table, same_size, step=300)
    assert table == same_size
    await _drain(same_size, step=300)
    assert same_size == {} and len(table) == 5000


def test_a_namespace_ratio_of_use_to_requests_is_learned_from_its_measured_pods() -> None:
    learned = LearnedUsage()
    facts = {("spark", f"e{i}"): PodFacts(None, 0.0, 1000, 2 << 30) for i in range(10)}
    usage = {pod: (100 * (i + 1), 1 << 30) for i, pod in enumerate(facts)}  # 10%..100% of cpu
    few = dict(list(usage.items())[: MIN_RATIO_PODS - 1])
    learned.observe(few, lambda ns, n: facts.get((ns, n)), NOW, 60.0)
    assert learned.ratio("spark") is None  # too few measured to say
    learned.observe(usage, lambda ns, n: facts.get((ns, n)), NOW, 60.0)
    assert learned.ratio("spark") == (0.55, 0.5)  # the mean, per resource
    assert learned.ratio("other") is None and learned.estimate("spark/ratio") is not None
    young = {pod: PodFacts(None, NOW - 1, 1000, 2 << 30) for pod in facts}
    fresh = LearnedUsage()
    fresh.observe(usage, lambda ns, n: young.get((ns, n)), NOW, 60.0)
    assert fresh.ratio("spark") is None  # placed within min_age: not fully in a rate window


def test_a_namespace_ratio_outlives_its_pods_for_the_next_job() -> None:
    """A batch tenant's job ends; its next job's first pods are judged by the ratio the last
    one's pods showed, not by placementEstimate; too few pods measured do not move it."""
    learned = LearnedUsage()
    facts = {("spark", f"e{i}"): PodFacts(None, 0.0, 1000, 2 << 30) for i in range(10)}
    usage = {pod: (400, 1 << 30) for pod in facts}
    lookup = lambda ns, n: facts.get((ns, n))  # noqa: E731
    learned.observe(usage, lookup, NOW, 60.0)
    assert learned.ratio("spark") == (0.4, 0.5)
    for step in range(1, learned_module.FORGET_REFRESHES + 1):  # the job is gone
        learned.observe({}, lookup, NOW + step, 60.0)
    assert learned.ratio("spark") == (0.4, 0.5)
    few = {pod: (900, 2 << 30) for pod in list(facts)[: MIN_RATIO_PODS - 1]}
    learned.observe(few, lookup, NOW + 20, 60.0)  # the next job's first measured pods
    assert learned.ratio("spark") == (0.4, 0.5)
    learned.observe({pod: (900, 2 << 30) for pod in facts}, lookup, NOW + 30, 60.0)
    assert learned.ratio("spark") == (0.9, 1.0)  # enough of them: theirs
    for step in range(1, learned_module.FORGET_REFRESHES + 1):
        learned.observe({}, lookup, NOW + 30 + learned_module.WORKLOAD_TTL + step, 60.0)
    assert learned.ratio("spark") is None  # forgotten after WORKLOAD_TTL without a pod
