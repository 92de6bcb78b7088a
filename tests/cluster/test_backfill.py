"""A replica that starts judges a node by the window its policy asks for, filled from the real
Prometheus' history: a node that was busy before the operator started and is idle now is passed
over as hot under `aggregation: max`, where its latest sample alone would make it the coolest."""

from __future__ import annotations

import asyncio

import pytest

from loadwise.explain import _explain
from loadwise.resources import to_amount
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import POLICIES, OperatorFactory
from .util import wait_bound

pytestmark = pytest.mark.cluster


async def test_a_starting_replica_fills_its_windows_from_prometheus_history(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    usage = {"bursty": 0.95, "steady": 0.5}
    bursty = await local_cluster.add_node(kube, "bursty", cpu_usage=0.95, cpu="4")
    await local_cluster.add_node(kube, "steady", cpu_usage=0.5, cpu="4")
    await local_cluster.wait_metrics(usage)
    await asyncio.sleep(6)  # a few scrapes of the burst, before any operator runs
    if local_cluster.usage is not None:  # KWOK's usage: the node's background pod
        await local_cluster.usage.set_background(kube, "bursty", 0.1, 0.0)
    else:  # the harness's exporter
        capacity = bursty["status"]["capacity"]
        memory = to_amount("memory", capacity["memory"])
        local_cluster.exporter.set_usage("bursty", 0.1, 0.0, memory, to_amount("cpu", "4"))
    await local_cluster.wait_metrics({"bursty": 0.1, "steady": 0.5})
    # A window long enough to hold the burst however slowly this machine gets here (the waits
    # for the metrics to show each change take up to 30 s each under load).
    spec = {"metrics": {"aggregation": "max", "windowSeconds": 180}}
    await kube.create(POLICIES, manifests.policy("peaks", cpu=1, memory=0, **spec))
    async with operator() as runtime:
        cache = runtime.scheduler.usage.caches["prometheus"]

        async def filled() -> bool:
            return cache.backfilled >= 180

        await wait_for(filled, 30, what="the windows filled from Prometheus")
        assert cache.backfill_note.startswith("filled from prometheus's history"), cache
        await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("web", namespace=ns))
        placed = await wait_bound(kube, ns, ["web"])
        # idle now (10%) but 95% within the window (its samples 6 s apart caught the burst):
        # hot, passed over for the steady node
        assert placed == {"web": "steady"}
    explained = await _explain(f"{ns}/web", local_cluster.operator_config())
    assert "load: max; windows hold up to" in explained, explained
    assert "(filled from prometheus's history (30 answers))" in explained, explained
