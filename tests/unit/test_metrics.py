import asyncio

import pytest

from loadwise.config import Config
from loadwise.metrics.cache import MetricsCache, NodeSample
from loadwise.metrics.prometheus import PrometheusError, parse_response


def vector(*items: tuple[str, str, object]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"node": n, "loadwise_resource": r}, "value": [1000.0, v]}
                for n, r, v in items
            ],
        },
    }


def test_parse_pairs_cpu_and_memory_per_node() -> None:
    samples = parse_response(
        vector(("a", "cpu", "0.5"), ("a", "memory", "0.25"), ("b", "cpu", "0.1")), "node", 5
    )
    assert samples == {"a": NodeSample(0.5, 0.25, 1000.0, 995.0)}  # b lacks memory: skipped


def test_parse_skips_garbage_entries() -> None:
    payload = vector(("a", "cpu", "NaN"), ("a", "memory", "0.2"), ("b", "cpu", "x"))
    payload["data"]["result"].append({"metric": {}, "value": [1, "0.1"]})  # type: ignore[index]
    payload["data"]["result"].append({"nonsense": True})  # type: ignore[index]
    assert parse_response(payload, "node", 0) == {}


def test_parse_clamps_out_of_range() -> None:
    samples = parse_response(vector(("a", "cpu", "1.7"), ("a", "memory", "-0.2")), "node", 0)
    assert samples["a"].cpu == 1.0 and samples["a"].memory == 0.0


@pytest.mark.parametrize(
    "payload",
    [None, [], {"status": "error", "error": "bad query"}, {"status": "success", "data": {}}],
)
def test_parse_rejects_bad_envelopes(payload: object) -> None:
    with pytest.raises(PrometheusError):
        parse_response(payload, "node", 0)


class FlakySource:
    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    async def fetch(self) -> dict[str, NodeSample]:
        self.calls += 1
        if self.fail:
            raise ConnectionError("refused")
        return {"a": NodeSample(0.5, 0.5, 1.0)}


async def test_cache_dedupes_refreshes_and_survives_failures() -> None:
    source = FlakySource()
    cache = MetricsCache(source, interval=10)
    assert await cache.refresh_if_due(now=100)
    assert not await cache.refresh_if_due(now=101)  # another policy's timer, same interval
    await asyncio.gather(*(cache.refresh_if_due(now=102) for _ in range(5)))
    assert source.calls == 1
    source.fail = True
    assert await cache.refresh_if_due(now=111)
    assert cache.last_error == "ConnectionError: refused"
    assert "a" in cache.samples  # old samples stay; they age out against the policy's max age


def test_config_from_env_names_the_variable() -> None:
    assert Config.from_env({}).scheduler_name == "loadwise-scheduler"
    config = Config.from_env({"LOADWISE_BIND_CONCURRENCY": "8", "LOADWISE_METRICS_SOURCES": "none"})
    assert config.bind_concurrency == 8 and config.metrics_sources == ()
    both = Config.from_env({"LOADWISE_METRICS_SOURCES": "prometheus, metrics-server"})
    assert both.metrics_sources == ("prometheus", "metrics-server")
    with pytest.raises(ValueError, match="LOADWISE_METRICS_SOURCES"):
        Config.from_env({"LOADWISE_METRICS_SOURCES": "graphite"})
    with pytest.raises(ValueError, match="LOADWISE_BIND_CONCURRENCY"):
        Config.from_env({"LOADWISE_BIND_CONCURRENCY": "zero"})


def test_node_metrics_become_utilisation_of_allocatable() -> None:
    from loadwise.metrics.metrics_server import MetricsServerError, parse_node_metrics

    allocatable = {"a": {"cpu": 4000, "memory": 8 << 30}, "b": {"cpu": 2000, "memory": 4 << 30}}
    payload = {
        "items": [
            {
                "metadata": {"name": "a"},
                "timestamp": "2026-01-01T00:00:10Z",
                "window": "10s",
                "usage": {"cpu": "1", "memory": "2Gi"},
            },
            {"metadata": {"name": "b"}, "timestamp": "garbage", "usage": {"cpu": "1"}},
            {
                "metadata": {"name": "unknown"},
                "timestamp": "2026-01-01T00:00:10Z",
                "usage": {"cpu": "1", "memory": "1"},
            },
        ]
    }
    samples = parse_node_metrics(payload, allocatable.get)
    assert set(samples) == {"a"}
    assert (samples["a"].cpu, samples["a"].memory) == (0.25, 0.25)
    assert samples["a"].timestamp - samples["a"].coverage == 10
    with pytest.raises(MetricsServerError):
        parse_node_metrics({"kind": "Status"}, allocatable.get)
