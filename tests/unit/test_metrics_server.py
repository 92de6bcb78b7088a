"""MetricsServerSource over the FakeTransport: one bounded GET of NodeMetrics per refresh;
an error answer fails the refresh, which the cache then reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from loadwise.metrics.cache import MetricsCache
from loadwise.metrics.metrics_server import PATH, TIMEOUT, MetricsServerSource

from ..fakes import FakeTransport, Reply

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


def answering(reply: Reply) -> FakeTransport:
    def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        return reply

    return FakeTransport(api)


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
