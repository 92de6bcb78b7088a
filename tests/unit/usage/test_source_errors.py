"""What a failing metrics source says, as it reaches status conditions and events: what the
failure means and what to check, as text (never a Python bytes repr or an exception class); a
wrong node label in the Prometheus query reported as such, not as nodes without samples."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from loadwise.usage.cache import MetricsCache, SourceError
from loadwise.usage.metrics_server import MetricsServerSource
from loadwise.usage.prometheus import PrometheusSource
from loadwise.usage.prometheus_answers import PrometheusError, parse_response
from loadwise.usage.prometheus_settings import PrometheusSettings

from ...fakes import Reply, answering
from ...helpers import prometheus_answering

NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "code": 404,
}


async def metrics_server_error(reply: Reply) -> str:
    cache = MetricsCache(MetricsServerSource(answering(reply), lambda _: None), 10.0)
    await cache.refresh()
    assert cache.last_error is not None
    return cache.last_error


async def test_metrics_server_404_asks_whether_the_apiservice_is_installed() -> None:
    assert await metrics_server_error((404, NOT_FOUND)) == (
        "listing node metrics failed with HTTP 404: is the metrics.k8s.io APIService "
        "installed?; the server could not find the requested resource"
    )


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ((503, b"service unavailable\n"), "is metrics-server running?; service unavailable"),
        ((403, b'{"kind":"Status","message":"forbidden: nope"}'), "(RBAC); forbidden: nope"),
        ((500, b"\xff\xfeodd"), "HTTP 500: \ufffd\ufffdodd"),
        ((502, b"x" * 500), "x" * 197 + "..."),
    ],
    ids=["503", "403", "undecodable", "long"],
)
async def test_metrics_server_errors_are_text_with_a_hint(reply: Reply, says: str) -> None:
    error = await metrics_server_error(reply)
    assert error.endswith(says)
    assert "b'" not in error and 'b"' not in error and "MetricsServerError" not in error


def series(*labels: dict[str, str]) -> dict[str, Any]:
    result = [{"metric": m, "value": [1000.0, "0.5"]} for m in labels]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_series_without_the_node_label_are_a_wrong_label_not_missing_samples() -> None:
    answer = series(
        {"instance": "10.0.0.1:9100", "job": "node", "loadwise_resource": "cpu"},
        {"instance": "10.0.0.1:9100", "job": "node", "loadwise_resource": "memory"},
    )
    with pytest.raises(PrometheusError) as caught:
        parse_response(answer, "node", 5)
    assert str(caught.value) == (
        "2 series came back but none has the node label 'node' "
        "(LOADWISE_PROMETHEUS_NODE_LABEL): they have instance, job; for kube-prometheus or "
        "kube-prometheus-stack, set LOADWISE_PROMETHEUS_PRESET (chart: metrics.preset) to its name"
    )
    with pytest.raises(PrometheusError, match=r"no other label \(the series read carry no 'node'"):
        parse_response(series({"loadwise_resource": "cpu"}), "node", 5)


def test_some_series_with_the_label_are_samples_and_the_rest_skipped() -> None:
    answer = series(
        {"node": "a", "loadwise_resource": "cpu"},
        {"node": "a", "loadwise_resource": "memory"},
        {"instance": "x", "loadwise_resource": "cpu"},
    )
    assert set(parse_response(answer, "node", 5)) == {"a"}
    assert parse_response(series(), "node", 5) == {}  # nothing came back: no label to blame


class Scripted(PrometheusSource):
    def __init__(self, answer: Any, known: list[str]) -> None:
        super().__init__(PrometheusSettings(url="http://127.0.0.1:1"), known_nodes=lambda: known)
        self.answer = answer

    async def _request_body(self, method: str, path: str, **kwargs: Any) -> bytes:
        if path != "/api/v1/query":  # the scrape intervals: as a Prometheus-alike without them
            raise PrometheusError("HTTP 404: not found")
        return orjson.dumps(self.answer)


def by_node(*names: str) -> dict[str, Any]:
    return series(
        *(
            {"node": name, "loadwise_resource": resource}
            for name in names
            for resource in ("cpu", "memory")
        )
    )


async def test_a_label_naming_no_node_of_the_cluster_fails_the_refresh_saying_so() -> None:
    cache = MetricsCache(Scripted(by_node("10.0.0.1:9100", "10.0.0.2:9100"), ["n1"]), 10)
    await cache.refresh()
    assert cache.last_error == (
        "no series' 'node' label names a node of the cluster (LOADWISE_PROMETHEUS_NODE_LABEL): "
        "it holds values such as 10.0.0.1:9100, 10.0.0.2:9100; the nodes are such as n1"
    )
    assert cache.samples == {}


async def test_a_past_answer_naming_none_of_todays_nodes_is_no_error() -> None:
    """A backfill asks for times before the cluster's nodes existed: other nodes' series then
    are history, not a wrong node label (that is judged on the current answer only)."""
    source = Scripted(by_node("long-gone"), ["n1"])
    assert set(await source.fetch_at(1_000_000.0)) == {"long-gone"}
    with pytest.raises(PrometheusError, match="no series' 'node' label names a node"):
        await source.fetch_at(None)


@pytest.mark.parametrize("known", [["n1", "n9"], []], ids=["one-known", "no-nodes-yet"])
async def test_samples_for_a_known_node_or_an_empty_cluster_are_fine(known: list[str]) -> None:
    cache = MetricsCache(Scripted(by_node("n1", "gone"), known), 10)
    await cache.refresh()
    assert cache.last_error is None and set(cache.samples) == {"n1", "gone"}


@pytest.fixture
async def bad_prometheus() -> AsyncIterator[str]:
    async def query(_: web.Request) -> web.Response:
        body = {"status": "error", "errorType": "bad_data", "error": 'parse error: "nod" here'}
        return web.Response(status=400, text=json.dumps(body))

    async with prometheus_answering(query) as url:
        yield url


async def test_a_prometheus_error_answer_is_its_error_text(bad_prometheus: str) -> None:
    source = PrometheusSource(PrometheusSettings(url=bad_prometheus))
    cache = MetricsCache(source, 10)
    try:
        await cache.refresh()
    finally:
        await source.close()
    assert cache.last_error == 'HTTP 400: parse error: "nod" here'


async def test_bearer_token_is_read_again_for_every_query_and_headers_are_sent(
    tmp_path: Path,
) -> None:
    """A projected or rotated token file changes under a running operator: each query reads
    it. A tenant header (Thanos, Cortex, Mimir) goes with every query too."""
    seen: list[tuple[str | None, str | None]] = []

    async def query(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), request.headers.get("X-Scope-OrgID")))
        body = {"status": "success", "data": {"resultType": "vector", "result": []}}
        return web.json_response(body)

    token = tmp_path / "token"
    token.write_text("first\n")
    async with prometheus_answering(query) as url:
        settings = PrometheusSettings(
            url=url, bearer_token_file=str(token), headers={"X-Scope-OrgID": "team-a"}
        )
        source = PrometheusSource(settings)
        try:
            await source.fetch()
            token.write_text("second\n")
            await source.fetch()
            token.unlink()
            with pytest.raises(SourceError, match="cannot read Prometheus credentials"):
                await source.fetch()
        finally:
            await source.close()
    assert seen == [("Bearer first", "team-a"), ("Bearer second", "team-a")]


def test_prometheus_connection_settings_are_checked_by_name(tmp_path: Path) -> None:
    from loadwise.config import Config

    secret = tmp_path / "secret"
    secret.write_text("x")
    with pytest.raises(ValueError, match="prometheus_bearer_token_file and prometheus_username"):
        Config.of(
            prometheus_bearer_token_file=str(secret),
            prometheus_username="u",
            prometheus_password_file=str(secret),
        )
    with pytest.raises(ValueError, match="prometheus_username and prometheus_password_file"):
        Config.of(prometheus_username="u")
    with pytest.raises(ValueError, match=r"prometheus_ca_file: .*missing is not a readable file"):
        Config.of(prometheus_ca_file=str(tmp_path / "missing"))
    parsed = Config.from_env({"LOADWISE_PROMETHEUS_HEADERS": '{"X-Scope-OrgID": "team-a"}'})
    assert parsed.sources.prometheus.headers == {"X-Scope-OrgID": "team-a"}
    with pytest.raises(ValueError, match=r"LOADWISE_PROMETHEUS_HEADERS: .*names to strings"):
        Config.from_env({"LOADWISE_PROMETHEUS_HEADERS": '{"X-Scope-OrgID": 1}'})


@pytest.mark.parametrize(
    ("instance", "fits"),
    [
        ("10.0.0.1:9100", "preset kube-prometheus-stack"),  # an address: no label names a node
        ("n1", "its `instance` is the node's name: preset kube-prometheus"),
    ],
)
async def test_a_missing_node_label_is_explained_by_a_raw_series_and_the_preset_that_fits(
    instance: str, fits: str
) -> None:
    """The default query aggregates `by (node)`: on another stack's series it returns one
    series without labels, which says nothing. One raw series of the metric it rates does."""

    async def query(request: web.Request) -> web.Response:
        text = str((await request.post())["query"])
        if text == "topk(1, node_cpu_seconds_total)":
            raw = {"__name__": "node_cpu_seconds_total", "instance": instance, "job": "ne"}
            return web.json_response(series(raw))
        return web.json_response(
            series({"loadwise_resource": "cpu"}, {"loadwise_resource": "memory"})
        )

    async with prometheus_answering(query) as url:
        source = PrometheusSource(PrometheusSettings(url=url), known_nodes=lambda: ["n1"])
        try:
            with pytest.raises(PrometheusError) as caught:
                await source.fetch()
        finally:
            await source.close()
    message = str(caught.value)
    assert "none has the node label 'node'" in message
    assert f"A node_cpu_seconds_total series carries instance={instance}, job=ne; " in message
    assert message.endswith(fits) or fits in message
