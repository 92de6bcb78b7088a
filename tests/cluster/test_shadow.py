"""The shadow trial on the local control plane, with the real kube-scheduler placing: loadwise,
in shadow mode, judges each pod kube-scheduler places and says where it would have put it; it
schedules nothing (its own pods stay pending) and writes nothing (no Lease, no event).

The world: a node at 95% CPU with no requests on it, and a node at 10% whose requests are
mostly taken; kube-scheduler's LeastAllocated goes by requests and picks the busy node, while
loadwise passes it over as hot."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loadwise import observability as obs
from loadwise.shadow_report import render
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import OperatorFactory
from .test_differential import kube_scheduler  # noqa: F401 - the fixture, used by name
from .util import events

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kube_scheduler")]


def pinned(ns: str, name: str, nodes: list[str], scheduler: str, cpu: str = "100m") -> Any:
    body = manifests.pod(name, namespace=ns, scheduler_name=scheduler, cpu=cpu)
    names = {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
    required = {"nodeSelectorTerms": [{"matchExpressions": [names]}]}
    body["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
    }
    return body


async def test_the_shadow_trial_judges_kube_schedulers_pods_and_writes_nothing(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    busy, roomy = f"{ns}-busy", f"{ns}-roomy"
    await local_cluster.add_node(kube, busy, cpu_usage=0.95, mem_usage=0.3, cpu="4")
    await local_cluster.add_node(kube, roomy, cpu_usage=0.1, mem_usage=0.3, cpu="4")
    pods = f"/api/v1/namespaces/{ns}/pods"
    big = pinned(ns, "big", [roomy], "default-scheduler", cpu="2500m")
    big["spec"]["nodeName"] = roomy  # bound directly: requests, little use
    await kube.create(pods, big)
    await local_cluster.wait_metrics({busy: 0.95, roomy: 0.1})
    before = obs.SHADOW_PODS.labels("yes")._value.get()
    config = {"shadow": True, "leader_elect": True}
    try:
        async with operator(**config) as runtime:
            assert runtime.shadow is not None and runtime.elector is None
            # `big` was first seen as the operator started: until a sample covers that moment
            # (the metrics lag, 6 s here), its estimate is added to roomy's figure
            await asyncio.sleep(8)
            await kube.create(pods, pinned(ns, "mine", [busy, roomy], "loadwise-scheduler"))
            for i in range(3):
                await kube.create(pods, pinned(ns, f"ks-{i}", [busy, roomy], "default-scheduler"))

            async def judged() -> bool:
                return runtime.shadow is not None and runtime.shadow.totals["pods"] >= 3

            await wait_for(judged, 30, what="the shadow trial judging kube-scheduler's pods")
            report = runtime.shadow.report()
            rows = {r["pod"]: r for r in report["rows"]}
            for i in range(3):
                row = rows[f"{ns}/ks-{i}"]
                assert (row["placed"], row["placed_hot"]) == (busy, True), row
                assert (row["would"], row["would_hot"]) == (roomy, False), row
            assert (report["placed_hot"], report["would_hot"], report["same"]) == (3, 0, 0)
            assert obs.SHADOW_PODS.labels("yes")._value.get() - before == 3
            text = render(report)
            assert "placed on a node hot for them: 3 by default-scheduler, 0 by loadwise" in text
            assert f"{ns}/ks-0" in text and roomy in text
            await asyncio.sleep(2)  # loadwise's own pod: never scheduled by a shadow trial
            mine = await kube.get(f"{pods}/mine")
            assert not mine["spec"].get("nodeName"), mine["spec"]
            lease = runtime.config.election
            path = f"/apis/coordination.k8s.io/v1/namespaces/{lease.lease_namespace}/leases"
            assert not await kube.exists(f"{path}/{lease.lease_name}")
            ours = [e for e in await events(kube, ns) if "loadwise" in str(e.get("source"))
                    + str(e.get("reportingComponent"))]  # fmt: skip
            assert ours == [], ours
    finally:
        for node in (busy, roomy):
            await local_cluster.remove_node(kube, node)
