import asyncio

import pytest

from loadwise.config import Config
from loadwise.usage.cache import MetricsCache, NodeSample
from loadwise.usage.prometheus_answers import PrometheusError, parse_response


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
    assert config.scheduling.bind_concurrency == 8 and config.metrics.enabled == ()
    both = Config.from_env({"LOADWISE_METRICS_SOURCES": "prometheus, metrics-server"})
    assert both.metrics.enabled == ("prometheus", "metrics-server")
    with pytest.raises(ValueError, match="LOADWISE_METRICS_SOURCES"):
        Config.from_env({"LOADWISE_METRICS_SOURCES": "graphite"})
    with pytest.raises(ValueError, match="LOADWISE_BIND_CONCURRENCY"):
        Config.from_env({"LOADWISE_BIND_CONCURRENCY": "zero"})


def test_node_metrics_become_utilisation_of_allocatable() -> None:
    from loadwise.usage.metrics_server import MetricsServerError, parse_node_metrics

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


def test_combined_query_tags_every_dimension() -> None:
    from loadwise.usage.prometheus import combined_query

    query = combined_query("C", "M", {"disk-io": "D"})
    assert query == (
        'label_replace(C, "loadwise_resource", "cpu", "", "")'
        ' or label_replace(M, "loadwise_resource", "memory", "", "")'
        ' or label_replace(D, "loadwise_resource", "disk-io", "", "")'
    )
    assert combined_query("C", "M") == combined_query("C", "M", {})


def test_parse_extra_dimensions_clamped_and_optional_per_node() -> None:
    payload = vector(
        ("a", "cpu", "0.5"),
        ("a", "memory", "0.25"),
        ("a", "disk-io", "1.5"),
        ("a", "net", "0.3"),
        ("b", "cpu", "0.1"),
        ("b", "memory", "0.2"),  # no disk-io: the key is simply absent
        ("b", "net", "NaN"),  # malformed: skipped, the node stays
        ("c", "disk-io", "0.4"),  # no cpu or memory: no sample
        ("a", "unasked", "0.9"),  # not a configured dimension
    )
    payload["data"]["result"].append(  # type: ignore[index]
        {"metric": {"node": "b", "loadwise_resource": "net"}, "value": [1000.0]}
    )
    samples = parse_response(payload, "node", 0, ("disk-io", "net"))
    assert set(samples) == {"a", "b"}
    assert samples["a"].extra == {"disk-io": 1.0, "net": 0.3}
    assert samples["b"].extra == {} and (samples["b"].cpu, samples["b"].memory) == (0.1, 0.2)
    assert parse_response(payload, "node", 0)["a"].extra == {}  # none configured: none kept


def pod_vector(*items: tuple[str, str, str, object]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"namespace": ns, "pod": pod, "loadwise_resource": r},
                    "value": [1000.0, v],
                }
                for ns, pod, r, v in items
            ],
        },
    }


def test_parse_pod_usage_pairs_cpu_cores_and_memory_bytes() -> None:
    from loadwise.usage.prometheus_answers import parse_pod_response

    payload = pod_vector(
        ("ns", "a", "cpu", "0.2500004"),  # a rate: 250m, not 251m
        ("ns", "a", "memory", "1048576"),
        ("ns", "b", "cpu", "0.1"),  # no memory: skipped
        ("ns", "c", "cpu", "-1"),  # negative: skipped
        ("ns", "c", "memory", "1"),
        ("ns", "d", "cpu", "Inf"),
        ("ns", "d", "memory", "1"),
        ("", "e", "cpu", "0.1"),  # no namespace
        ("", "e", "memory", "1"),
        ("ns", "f", "disk", "0.1"),
    )
    payload["data"]["result"].extend(  # type: ignore[index]
        [{"metric": {"pod": "x"}, "value": [1, "1"]}, {"nonsense": 1}, "garbage"]
    )
    assert parse_pod_response(payload) == {("ns", "a"): (250, 1048576)}
    with pytest.raises(PrometheusError):
        parse_pod_response({"status": "error", "error": "bad"})


def test_config_validates_dimensions_and_pod_settings() -> None:
    from loadwise.usage.prometheus_settings import DEFAULT_POD_CPU_QUERY

    config = Config.from_env({})
    assert config.sources.prometheus.dimensions == {} and config.metrics.learn_usage
    assert config.sources.prometheus.pod_cpu_query == DEFAULT_POD_CPU_QUERY
    config = Config.from_env(
        {
            "LOADWISE_PROMETHEUS_DIMENSIONS": '{"disk-io": "q1", "gpu0": "q2"}',
            "LOADWISE_LEARN_USAGE": "false",
            "LOADWISE_PROMETHEUS_POD_MEMORY_QUERY": "m",
        }
    )
    assert config.sources.prometheus.dimensions == {"disk-io": "q1", "gpu0": "q2"}
    assert not config.metrics.learn_usage and config.sources.prometheus.pod_memory_query == "m"
    assert (
        Config.from_env({"LOADWISE_PROMETHEUS_DIMENSIONS": ""}).sources.prometheus.dimensions == {}
    )
    for bad in (
        "{not json",
        '["q"]',
        '{"cpu": "q"}',
        '{"memory": "q"}',
        '{"Disk": "q"}',
        '{"1disk": "q"}',
        '{"disk_io": "q"}',
        '{"d": ""}',
        '{"d": 1}',
    ):
        with pytest.raises(ValueError, match="LOADWISE_PROMETHEUS_DIMENSIONS"):
            Config.from_env({"LOADWISE_PROMETHEUS_DIMENSIONS": bad})
    with pytest.raises(ValueError, match="LOADWISE_PROMETHEUS_POD_CPU_QUERY"):
        Config.from_env({"LOADWISE_PROMETHEUS_POD_CPU_QUERY": ""})
    with pytest.raises(ValueError, match="LOADWISE_LEARN_USAGE"):
        Config.from_env({"LOADWISE_LEARN_USAGE": "maybe"})
