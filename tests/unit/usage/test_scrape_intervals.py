"""Rate windows and lag from the scrape interval Prometheus reports (usage/scrape_intervals.py),
against a stand-in Prometheus serving the three endpoints involved; the real Prometheus is in
tests/cluster/test_real_nodes.py (each stack's preset)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from loadwise.config import Config
from loadwise.usage.prometheus import PrometheusSource
from loadwise.usage.prometheus_settings import PRESETS
from loadwise.usage.scrape_intervals import (
    intervals_by_target,
    lag_for,
    metric_interval,
    parse_duration,
    window_for,
    windowed_metrics,
)

from ...helpers import prometheus_answering

NOW = 1_700_000_000.0
NODE = {"job": "node-exporter", "instance": "n1", "node": "n1"}
KUBELET = {"job": "kubelet", "instance": "10.0.0.1:10250", "node": "n1", "metrics_path": "/c"}


def test_durations_windows_and_lags() -> None:
    assert [parse_duration(t) for t in ("15s", "1m", "1m30s", "500ms", "2h")] == [
        15,
        60,
        90,
        0.5,
        7200,
    ]
    assert [parse_duration(t) for t in ("", "15", "1x", "0s", None, 15)] == [None] * 6
    # four scrapes, at least a minute: 15 s keeps the old 1m window and 75 s lag
    assert [window_for(i) for i in (None, 1, 15, 30, 60)] == [60, 60, 60, 120, 240]
    assert [lag_for(i) for i in (None, 15, 30, 60)] == [75, 75, 150, 300]


def test_every_preset_rates_one_metric_over_window() -> None:
    assert {name: windowed_metrics(p[1:3]) for name, p in PRESETS.items()} == {
        "node-exporter": {"node_cpu_seconds_total"},
        "kube-prometheus": {"node_cpu_seconds_total"},
        "kube-prometheus-stack": {"container_cpu_usage_seconds_total"},
    }
    assert windowed_metrics(["rate(x[1m])"]) == set()  # a fixed window is the user's


def test_a_metric_takes_the_longest_interval_of_the_targets_exposing_it() -> None:
    targets = intervals_by_target(
        envelope(
            {
                "activeTargets": [
                    {"labels": NODE, "scrapeInterval": "30s"},
                    {"labels": {**NODE, "instance": "n2"}, "scrapeInterval": "1m"},
                    {"labels": KUBELET, "scrapeInterval": "10s"},
                    {"labels": {"job": "x"}, "scrapeInterval": "bad"},
                    "junk",
                ]
            }
        )
    )
    assert len(targets) == 3
    metadata = envelope([{"target": NODE}, {"target": {**NODE, "instance": "n2"}}, {"x": 1}])
    assert metric_interval(metadata, targets) == 60
    assert metric_interval(envelope([{"target": {"job": "gone"}}]), targets) is None
    with pytest.raises(ValueError, match="bad"):
        metric_interval({"status": "error", "error": "bad"}, targets)


def envelope(data: Any) -> dict[str, Any]:
    return {"status": "success", "data": data}


@asynccontextmanager
async def prometheus(interval: str | None, seen: list[str]) -> AsyncIterator[str]:
    """A stand-in Prometheus whose node-exporter and cAdvisor targets are scraped every
    `interval` (None: without the targets endpoints, as Thanos or Mimir)."""

    async def query(request: web.Request) -> web.Response:
        text = str((await request.post())["query"])
        seen.append(text)
        result = [
            {"metric": {"node": "n1", "loadwise_resource": r}, "value": [NOW, "0.5"]}
            for r in ("cpu", "memory")
        ]
        return web.json_response(envelope({"resultType": "vector", "result": result}))

    async def targets(_: web.Request) -> web.Response:
        seen.append("targets")
        active = [{"labels": labels, "scrapeInterval": interval} for labels in (NODE, KUBELET)]
        return web.json_response(envelope({"activeTargets": active}))

    async def metadata(request: web.Request) -> web.Response:
        metric = request.query["metric"]
        seen.append(f"metadata {metric}")
        target = NODE if metric.startswith("node_") else KUBELET
        return web.json_response(envelope([{"target": target, "type": "counter"}]))

    gets = {"/api/v1/targets": targets, "/api/v1/targets/metadata": metadata}
    async with prometheus_answering(query, gets if interval is not None else None) as url:
        yield url


def source(url: str, config: Config) -> PrometheusSource:
    return PrometheusSource(
        config.sources.prometheus.model_copy(update={"url": url}), config.metrics.lag
    )


async def test_a_one_minute_scrape_gets_a_four_minute_window_and_a_five_minute_lag() -> None:
    """The `prometheus` Helm chart scrapes every minute: a 1m window would hold one sample."""
    seen: list[str] = []
    async with prometheus("1m", seen) as url:
        prom = source(url, Config())
        try:
            sample = (await prom.fetch())["n1"]
            await prom.fetch_pods()
            await prom.fetch()  # asked once, not at every refresh
        finally:
            await prom.close()
    assert seen.count("targets") == 1
    assert {"metadata node_cpu_seconds_total", "metadata container_cpu_usage_seconds_total"} <= (
        set(seen)
    )
    queries = [q for q in seen if "loadwise_resource" in q]
    assert "[240s]" in queries[0] and "$window" not in queries[0]
    assert "[240s]" in queries[1]  # the pods' cAdvisor series: the same interval here
    assert (prom.window, prom.lag) == (240, 300)
    assert sample.timestamp - sample.coverage == 300


async def test_without_the_targets_api_the_minute_window_and_75s_lag_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []
    async with prometheus(None, seen) as url:
        prom = source(url, Config())
        try:
            with caplog.at_level(logging.WARNING, "loadwise.usage.prometheus"):
                sample = (await prom.fetch())["n1"]
        finally:
            await prom.close()
    assert "[60s]" in seen[0] and (prom.window, prom.lag) == (60, 75)
    assert sample.timestamp - sample.coverage == 75
    assert "cannot read Prometheus' scrape intervals (HTTP 404" in caplog.text


async def test_a_set_lag_or_a_query_with_its_own_window_is_kept() -> None:
    seen: list[str] = []
    async with prometheus("30s", seen) as url:
        prom = source(url, Config.of(metrics_lag=20))
        custom = source(url, Config.of(prometheus_cpu_query="avg by (node) (rate(x[2m]))"))
        try:
            await prom.fetch()
            seen.clear()
            await custom.fetch()
        finally:
            await prom.close()
            await custom.close()
    assert (prom.window, prom.lag) == (120, 20)
    # the pods' default query still asks for its metric's interval, not the node query's
    assert custom.lag == 75 and "metadata node_cpu_seconds_total" not in seen
    assert any("rate(x[2m])" in q for q in seen)


def test_the_preset_gives_the_url_unless_one_is_set() -> None:
    assert Config().sources.prometheus.url == "http://prometheus-server.monitoring.svc"
    kps = "kube-prometheus-stack"
    assert (
        Config.of(prometheus_preset=kps).sources.prometheus.url
        == "http://prometheus-operated.monitoring.svc:9090"
    )
    assert Config.from_env({"LOADWISE_PROMETHEUS_URL": ""}).sources.prometheus.url.startswith(
        "http://"
    )
    assert Config.of(
        prometheus_preset=kps, prometheus_url="http://p:9090"
    ).sources.prometheus.url == ("http://p:9090")
    assert Config.from_env({"LOADWISE_METRICS_LAG": ""}).metrics.lag is None
    assert Config.from_env(Config.of(metrics_lag=None).to_env()).metrics.lag is None
