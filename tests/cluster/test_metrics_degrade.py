"""Policy status and the degrade/recover cycle with the real Prometheus behind a cuttable proxy."""

from __future__ import annotations

from typing import Any

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.fault_proxy import TcpProxy
from loadwise_dev.kube import Kube

from .conftest import POLICIES, OperatorFactory
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster


async def condition(kube: Kube, name: str, kind: str) -> dict[str, Any] | None:
    status = (await kube.get(f"{POLICIES}/{name}")).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == kind), None)


async def test_status_degrade_warning_and_recovery(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    assert local_cluster.prometheus is not None
    await local_cluster.add_node(kube, "n1", cpu_usage=0.3)
    await local_cluster.add_node(kube, "n2", cpu_usage=0.5)
    await local_cluster.wait_metrics({"n1": 0.3, "n2": 0.5})
    await kube.create(POLICIES, manifests.policy("watched", metrics={"maxAgeSeconds": 8}))
    proxy = TcpProxy("127.0.0.1", local_cluster.prometheus.port)
    await proxy.up()
    try:
        async with operator(prometheus_url=proxy.url) as runtime:

            async def available(expected: str) -> bool:
                found = await condition(kube, "watched", "MetricsAvailable")
                return found is not None and found["status"] == expected

            await wait_for(lambda: available("True"), 20, what="MetricsAvailable=True")
            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", manifests.pod("before", namespace=ns)
            )
            await wait_bound(kube, ns, ["before"])
            assert "by metrics" in (await wait_event(kube, ns, "before", "Scheduled"))["message"]

            async def counted() -> bool:
                status = (await kube.get(f"{POLICIES}/watched"))["status"]
                return bool(
                    status.get("nodesWithFreshMetrics") == 2 and status.get("lastMetricsRefresh")
                )

            await wait_for(counted, 20, what="status figures")

            await proxy.down()
            await wait_for(lambda: available("False"), 20, what="MetricsAvailable=False")
            degraded = await condition(kube, "watched", "MetricsAvailable")
            assert degraded is not None and "refresh failed" in degraded["message"]

            async def warned() -> bool:
                # As `kubectl describe schedpol watched` looks for them: every namespace, an
                # involvedObject with no namespace (the policy is cluster-scoped).
                selector = (
                    "involvedObject.kind=SchedulingPolicy,involvedObject.name=watched,"
                    "involvedObject.namespace="
                )
                events = await kube.list("/api/v1/events", fieldSelector=selector)
                return any(
                    e["type"] == "Warning" and e["reason"] == "MetricsDegraded" for e in events
                )

            await wait_for(warned, 20, what="Warning event on the policy")
            # The operator-level view of the same: metric, readiness text, event on the Lease.
            assert "metrics_source/prometheus" in runtime.degradations.active
            assert "metrics_source/prometheus" in runtime.readiness()[1]

            async def aged_out() -> bool:
                status = (await kube.get(f"{POLICIES}/watched"))["status"]
                return bool(status.get("nodesWithFreshMetrics") == 0)

            # The last samples serve until they are older than maxAgeSeconds, then requests do.
            await wait_for(aged_out, 20, what="samples aged out")
            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", manifests.pod("during", namespace=ns)
            )
            await wait_bound(kube, ns, ["during"])  # scheduling goes on, by requests
            assert "by requests" in (await wait_event(kube, ns, "during", "Scheduled"))["message"]

            await proxy.up()
            await wait_for(lambda: available("True"), 20, what="recovery")
            await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("after", namespace=ns))
            await wait_bound(kube, ns, ["after"])
            assert "by metrics" in (await wait_event(kube, ns, "after", "Scheduled"))["message"]
    finally:
        await proxy.down()
