"""MetricsServerSource over the FakeTransport: one bounded GET of NodeMetrics per refresh;
an error answer fails the refresh, which the cache then reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from loadwise.usage.cache import MetricsCache
from loadwise.usage.learned import PodFacts
from loadwise.usage.metrics_server import PATH, TIMEOUT, MetricsServerSource

from ...fakes import FakeTransport, Reply, answering

ALLOCATABLE = {"a": {"cpu": 4000, "memory": 8 << 30}}
NODE_METRICS = {
    "kind": "NodeMetricsList",
    "items": [
        {
            "metadata": {"name": "a"},
            "timestamp": "2026-01-01T00:00:10Z",
            "window": "20s",
            "usage": {"cpu": "2", "memory": "2Gi"},
        }
    ],
}


async def test_one_get_of_all_node_metrics_becomes_samples() -> None:
    fake = answering((200, NODE_METRICS))
    samples = await MetricsServerSource(fake, ALLOCATABLE.get).fetch()
    assert (samples["a"].cpu, samples["a"].memory) == (0.5, 0.25)
    assert samples["a"].timestamp - samples["a"].coverage == 20
    (call,) = fake.calls
    assert (call.method, call.path) == ("GET", PATH)
    assert call.timeout is TIMEOUT and TIMEOUT.total == 5  # never the 30 s default


@pytest.mark.parametrize("reply", [(503, b"service unavailable"), (404, b"")])
async def test_an_error_answer_fails_the_refresh_and_keeps_the_samples(reply: Reply) -> None:
    fake = answering((200, NODE_METRICS))
    cache = MetricsCache(MetricsServerSource(fake, ALLOCATABLE.get), 10.0)
    await cache.refresh()
    assert set(cache.samples) == {"a"} and cache.last_error is None
    fake.handler = answering(reply).handler
    await cache.refresh()
    assert cache.last_error is not None and f"HTTP {reply[0]}" in cache.last_error
    assert set(cache.samples) == {"a"}  # kept: they age out against the policy's maximum age


def pod_item(ns: str, name: str, *usages: object) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name},
        "timestamp": "2026-01-01T00:00:10Z",
        "window": "20s",
        "containers": [{"name": f"c{i}", "usage": u} for i, u in enumerate(usages)],
    }


POD_METRICS = {
    "kind": "PodMetricsList",
    "items": [
        pod_item(
            "ns", "a", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "5000000n", "memory": "1Ki"}
        ),
        pod_item("ns", "b", {"cpu": "1", "memory": "1Gi"}, {"cpu": "x", "memory": "1Ki"}),
        pod_item("ns", "c"),  # no containers reported yet
        pod_item("ns", "d", {"cpu": "1"}),  # no memory
        pod_item("ns", "e", {"cpu": "-1", "memory": "1"}),
        pod_item("ns", "f", {"cpu": {"x": 1}, "memory": "1"}),
        {"metadata": {"name": "no-namespace"}, "containers": []},
        "garbage",
    ],
}


def test_pod_metrics_sum_the_containers_and_skip_malformed_pods() -> None:
    from loadwise.usage.metrics_server import MetricsServerError, parse_pod_metrics

    assert parse_pod_metrics(POD_METRICS) == {("ns", "a"): (255, (64 << 20) + 1024)}
    with pytest.raises(MetricsServerError):
        parse_pod_metrics({"kind": "Status"})


async def test_pods_fetched_and_learned_alongside_nodes_and_a_pod_failure_keeps_the_nodes() -> None:
    from loadwise.usage.metrics_server import PODS_PATH

    answers: dict[str, Reply] = {PATH: (200, NODE_METRICS), PODS_PATH: (200, POD_METRICS)}

    def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        return answers[path]

    fake = FakeTransport(api)
    placed = {("ns", "a"): PodFacts("ns/ReplicaSet/web", 0.0, 0, 0)}
    source = MetricsServerSource(fake, ALLOCATABLE.get)
    cache = MetricsCache(source, 10.0, lambda ns, name: placed.get((ns, name)), 30.0)
    await cache.refresh()
    assert sorted(call.path for call in fake.calls) == [PATH, PODS_PATH]
    assert all(call.timeout is TIMEOUT for call in fake.calls)
    assert set(cache.pod_usage) == {("ns", "a")} and cache.pods_error is None
    assert cache.learned.estimate("ns/ReplicaSet/web") == cache.pod_usage[("ns", "a")]
    answers[PODS_PATH] = (403, b"forbidden")  # e.g. RBAC without pods
    answers[PATH] = (200, {**NODE_METRICS, "items": []})
    refreshes = cache.refreshes
    await cache.refresh()
    assert cache.last_error is None and cache.refreshes == refreshes + 1  # nodes fine
    assert cache.pods_error is not None and "HTTP 403" in cache.pods_error
    assert set(cache.pod_usage) == {("ns", "a")}  # the last good answer stays


async def test_no_pod_request_without_learning() -> None:
    fake = answering((200, NODE_METRICS))
    cache = MetricsCache(MetricsServerSource(fake, ALLOCATABLE.get), 10.0)
    await cache.refresh()
    assert [call.path for call in fake.calls] == [PATH] and cache.pod_usage == {}


async def test_a_large_pod_metrics_list_is_read_in_slices_with_every_pod() -> None:
    from loadwise.usage import sliced_json
    from loadwise.usage.metrics_server import SLICE_BYTES, parse_pod_metrics

    items = [
        {
            "metadata": {"name": f"p{i}", "namespace": f"ns{i % 7}"},
            "containers": [{"name": "c", "usage": {"cpu": f"{i % 900 + 1}m", "memory": "1Mi"}}],
        }
        for i in range(4000)
    ]
    listed = {"kind": "PodMetricsList", "items": items}
    body = orjson.dumps(listed)
    assert len(list(sliced_json.slices(body, "items", "metadata", SLICE_BYTES))) > 2
    usage = await MetricsServerSource(answering((200, body)), ALLOCATABLE.get).fetch_pods()
    assert len(usage) == 4000 and usage == parse_pod_metrics(listed)
