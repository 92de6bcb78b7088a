"""The metrics-server source through the real kube-apiserver's aggregation layer (with a
stand-in behind it: see loadwise_dev.metrics_api for why)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.metrics_api import MetricsApiStandIn

from .conftest import POLICIES, OperatorFactory
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster


@pytest.fixture
async def metrics_api(kube: Kube, local_cluster: LocalCluster) -> AsyncIterator[MetricsApiStandIn]:
    pki = local_cluster.cp.workdir / "pki"
    stand_in = MetricsApiStandIn(
        local_cluster.exporter, pki / "apiserver.crt", pki / "apiserver.key"
    )
    stand_in.start()
    await stand_in.register(kube)

    async def served() -> bool:
        try:
            await kube.get("/apis/metrics.k8s.io/v1beta1/nodes")
            return True
        except KubeError:
            return False

    try:
        await wait_for(served, 60, interval=0.5, what="metrics.k8s.io served by the aggregator")
        yield stand_in
    finally:
        await stand_in.unregister(kube)
        stand_in.stop()


async def test_policy_reading_metrics_server_places_by_node_metrics(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    metrics_api: MetricsApiStandIn,
) -> None:
    await local_cluster.add_node(kube, "cool", cpu_usage=0.2, mem_usage=0.2)
    await local_cluster.add_node(kube, "warm", cpu_usage=0.6, mem_usage=0.6)
    listed = await kube.get("/apis/metrics.k8s.io/v1beta1/nodes")
    assert {item["metadata"]["name"] for item in listed["items"]} >= {"cool", "warm"}
    await kube.create(POLICIES, manifests.policy("ms", metrics={"source": "metrics-server"}))
    async with operator(metrics_sources=("metrics-server",)) as runtime:
        cache = runtime.scheduler.caches["metrics-server"]

        async def sampled() -> bool:
            await cache.refresh()
            return {"cool", "warm"} <= set(cache.samples)

        await wait_for(sampled, 20, what="NodeMetrics through the aggregation layer")
        assert cache.samples["warm"].cpu == pytest.approx(0.6, abs=0.01)
        await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("p", namespace=ns))
        assert (await wait_bound(kube, ns, ["p"]))["p"] == "cool"
        assert "by metrics" in (await wait_event(kube, ns, "p", "Scheduled"))["message"]
