"""The metrics-server source on simulated nodes, with nothing home-made in the pipeline: KWOK
plays the nodes' kubelets and serves their `/metrics/resource` from its own ResourceUsage
objects (each pod uses what its `kwok.x-k8s.io/usage-*` annotations say), the real
metrics-server (v0.8.0) scrapes them, and the real kube-apiserver's aggregation layer serves
NodeMetrics and PodMetrics. `kubectl top` and loadwise read the same figures, and loadwise
places by them. The same usage reaches loadwise through the real Prometheus too, from a KWOK
Metric shaped like the kubelet's cAdvisor series, read by the kube-prometheus-stack preset.
(tests/cluster/test_real_nodes.py does both on a real kubelet.)"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from loadwise.config import Config
from loadwise.usage.cache import NodeSample
from loadwise.usage.prometheus import PrometheusSource
from loadwise.usage.prometheus_answers import PrometheusError
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.controlplane import k8s_bin_dir
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.kwok import USAGE_CPU, USAGE_MEMORY
from loadwise_dev.prometheus_server import Prometheus
from loadwise_dev.real_metrics_server import MetricsServer

from .conftest import POLICIES
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster
NS = "apps"
WANT = {"busy": 0.6, "quiet": 0.2}  # the CPU the pods' annotations make KWOK report


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A control plane of its own: KWOK with its metrics, and no Prometheus."""
    cluster = LocalCluster(prometheus=False, kwok=True, kwok_metrics=True).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def metrics_server(cluster: LocalCluster) -> Iterator[MetricsServer]:
    server = MetricsServer(cluster.cp).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def mkube(cluster: LocalCluster, metrics_server: MetricsServer) -> AsyncIterator[Kube]:
    async with cluster.kube() as client:
        await metrics_server.register(client)
        await cluster.install_crd(client)
        await client.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await cluster.wait_namespace(client, NS)
        yield client


def using(name: str, node: str, cpu: str, memory: str) -> dict[str, Any]:
    """A pod already on `node` (no scheduler involved) that uses this much, by KWOK."""
    body = manifests.pod(name, namespace=NS, scheduler_name="default-scheduler")
    body["metadata"]["annotations"] = {USAGE_CPU: cpu, USAGE_MEMORY: memory}
    body["spec"]["nodeName"] = node
    return body


async def kubectl_top(cluster: LocalCluster, *args: str) -> dict[str, list[str]]:
    done = await asyncio.to_thread(
        subprocess.run,
        [str(k8s_bin_dir() / "kubectl"), f"--kubeconfig={cluster.cp.kubeconfig}", "top", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    rows = done.stdout.splitlines()[1:] if done.returncode == 0 else []
    return {row.split()[0]: row.split()[1:] for row in rows}


async def test_kubectl_top_and_loadwise_read_kwok_usage_alike_and_loadwise_places_by_it(
    mkube: Kube, cluster: LocalCluster
) -> None:
    # 4 cores and 16 GiB each (manifests.node): busy at 60% CPU and 25% memory, quiet at 20%.
    await cluster.add_node(mkube, "busy")
    await cluster.add_node(mkube, "quiet")
    await mkube.create(f"/api/v1/namespaces/{NS}/pods", using("load-1", "busy", "2400m", "4Gi"))
    await mkube.create(f"/api/v1/namespaces/{NS}/pods", using("load-2", "quiet", "800m", "1Gi"))
    apiservice = "/apis/metrics.k8s.io/v1beta1/nodes"

    async def listed() -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = await mkube.get(apiservice)
        except KubeError:
            return None
        names = {item["metadata"]["name"] for item in answer["items"]}
        return answer if {"busy", "quiet"} <= names else None

    await wait_for(listed, 90, interval=1.0, what="NodeMetrics of both KWOK nodes")
    top = await wait_for(
        lambda: _both(kubectl_top(cluster, "node")), 30, what="kubectl top node for both"
    )
    # A rate of KWOK's counters over metrics-server's 10 s: within 1% (a CI run read 2394m,
    # the counters' and the scrape's clocks a few tens of milliseconds apart under load).
    assert abs(milli(top["busy"][0]) - 2400) <= 24 and top["busy"][2] == "4096Mi", top
    assert abs(milli(top["quiet"][0]) - 800) <= 8 and top["quiet"][2] == "1024Mi", top

    async def pod_rows() -> dict[str, list[str]] | None:
        rows = await kubectl_top(cluster, "pod", "-n", NS)
        return rows if "load-1" in rows else None

    pods = await wait_for(pod_rows, 30, interval=1.0, what="kubectl top pod")
    assert abs(milli(pods["load-1"][0]) - 2400) <= 24 and pods["load-1"][1] == "4096Mi", pods

    await mkube.create(POLICIES, manifests.policy("ms", metrics={"source": "metrics-server"}))
    config = cluster.operator_config(metrics_sources=("metrics-server",))
    async with running_operator(config, cluster.cp.kubeconfig) as runtime:
        cache = runtime.scheduler.usage.caches["metrics-server"]

        async def sampled() -> bool:
            await cache.refresh()
            return {"busy", "quiet"} <= set(cache.samples)

        await wait_for(sampled, 30, what="loadwise's NodeMetrics")
        # What loadwise scores by is what kubectl top shows: 2400m of 4 cores, 4 GiB of 16.
        assert cache.samples["busy"].cpu == pytest.approx(0.6, abs=0.01)
        assert cache.samples["busy"].memory == pytest.approx(0.25, abs=0.01)
        assert cache.samples["quiet"].cpu == pytest.approx(0.2, abs=0.01)
        await mkube.create(f"/api/v1/namespaces/{NS}/pods", manifests.pod("p", namespace=NS))
        assert (await wait_bound(mkube, NS, ["p"], timeout=60))["p"] == "quiet"
        assert "by metrics" in (await wait_event(mkube, NS, "p", "Scheduled"))["message"]


def milli(cpu: str) -> int:
    return int(cpu.removesuffix("m")) if cpu.endswith("m") else int(float(cpu) * 1000)


async def test_the_same_usage_reaches_loadwise_through_prometheus_as_cadvisor_series(
    mkube: Kube, cluster: LocalCluster
) -> None:
    """Runs after the test above (its nodes and pods): busy 60%, quiet 20%, and a node without
    pods, which the preset reads as 0 rather than as missing."""
    assert cluster.kwok is not None
    await cluster.add_node(mkube, "idle")
    job = cluster.kwok.cadvisor_scrape_config(["busy", "quiet", "idle"])
    prometheus = await asyncio.to_thread(Prometheus([], "10s", [job]).start)
    config = Config.of(prometheus_preset="kube-prometheus-stack")
    source = PrometheusSource(config.sources.prometheus.model_copy(update={"url": prometheus.url}))
    source.retry_discovery = 1.0  # until Prometheus has scraped (and knows) the targets
    try:

        async def sampled() -> dict[str, NodeSample] | None:
            with contextlib.suppress(PrometheusError):
                found = await source.fetch()
                # A rate over the 60 s window reads low until the counters' series fill it
                # (before two scrapes the preset reads 0).
                if (
                    {"busy", "quiet", "idle"} <= set(found)
                    and all(abs(found[node].cpu - cpu) <= 0.01 for node, cpu in WANT.items())
                    and source.intervals  # asked at each fetch's start, until known
                ):
                    return found
            return None

        found = await wait_for(sampled, 150, interval=2.0, what="cAdvisor-shaped series of KWOK")
        assert found["busy"].memory == pytest.approx(0.25, abs=0.01)
        assert found["idle"].cpu == 0.0
        assert source.intervals == {"container_cpu_usage_seconds_total": 10.0}  # as scraped
        assert (source.window, source.lag) == (60, 70)
        usage = await source.fetch_pods()
        cpu, memory = usage[(NS, "load-1")]
        assert abs(cpu - 2400) <= 5 and memory == 4 << 30, usage
    finally:
        await source.close()
        await asyncio.to_thread(prometheus.stop)


async def _both(top: Any) -> dict[str, list[str]] | None:
    rows: dict[str, list[str]] = await top
    ok = all(rows.get(n, ["<unknown>"])[0] != "<unknown>" for n in ("busy", "quiet"))
    return rows if ok else None
