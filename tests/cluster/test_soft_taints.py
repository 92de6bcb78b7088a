"""Soft taints on the local control plane, with the real kube-scheduler: a node hot through the
real Prometheus gets loadwise.io/hot:PreferNoSchedule beside its own taint, so pods
kube-scheduler places avoid it; cool again, the taint goes and its own stays."""

from __future__ import annotations

import pytest

from loadwise.resources import to_amount
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import OperatorFactory
from .test_differential import kube_scheduler  # noqa: F401 - the fixture, used by name

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kube_scheduler")]

KEY = "loadwise.io/hot"
OWN = {"key": "example.com/team", "value": "a", "effect": "PreferNoSchedule"}


async def taints(kube: Kube, node: str) -> list[dict[str, str]]:
    raw = await kube.get(f"/api/v1/nodes/{node}")
    return [
        {k: t[k] for k in ("key", "value", "effect")}
        for t in (raw.get("spec") or {}).get("taints") or ()
    ]


async def test_a_hot_node_is_soft_tainted_so_kube_scheduler_avoids_it_until_it_cools(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    hot, cool = f"{ns}-hot", f"{ns}-cool"
    await local_cluster.add_node(kube, hot, cpu_usage=0.95, mem_usage=0.3, cpu="4")
    await local_cluster.add_node(kube, cool, cpu_usage=0.1, mem_usage=0.3, cpu="4")
    await kube.merge_patch(f"/api/v1/nodes/{hot}", {"spec": {"taints": [OWN]}})
    settings = {"soft_taints": True, "soft_taint_hot_refreshes": 2, "soft_taint_cool_refreshes": 3}
    try:
        await soft_tainted_then_not(kube, local_cluster, ns, operator, settings, hot, cool)
    finally:  # a node left tainted would give later helm installs a cleanup hook to run
        for node in (hot, cool):
            await local_cluster.remove_node(kube, node)


async def soft_tainted_then_not(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    settings: dict[str, object],
    hot: str,
    cool: str,
) -> None:
    async with operator(**settings):

        async def tainted() -> bool:
            return any(t["key"] == KEY for t in await taints(kube, hot))

        await wait_for(tainted, 60, what="the hot node soft-tainted")
        ours = {"key": KEY, "value": "true", "effect": "PreferNoSchedule"}
        assert await taints(kube, hot) == [OWN, ours]
        assert await taints(kube, cool) == []
        # kube-scheduler, pinned to the two nodes, scores the soft-tainted one last
        for i in range(4):
            body = manifests.pod(f"ks-{i}", namespace=ns, scheduler_name="default-scheduler")
            names = {"key": "kubernetes.io/hostname", "operator": "In", "values": [hot, cool]}
            required = {"nodeSelectorTerms": [{"matchExpressions": [names]}]}
            body["spec"]["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            }
            body["spec"]["tolerations"] = [{"key": OWN["key"], "operator": "Exists"}]
            await kube.create(f"/api/v1/namespaces/{ns}/pods", body)

        async def placed() -> list[str] | None:
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
            nodes = [p["spec"].get("nodeName") for p in pods]
            return [str(n) for n in nodes] if len(nodes) == 4 and all(nodes) else None

        assert await wait_for(placed, 30, what="kube-scheduler's pods bound") == [cool] * 4
        if local_cluster.usage is not None:  # KWOK's usage: the node's background pod
            await local_cluster.usage.set_background(kube, hot, 0.1, 0.3)
        else:  # the harness's exporter
            local_cluster.exporter.set_usage(hot, 0.1, 0.3, 16 << 30, to_amount("cpu", "4"))

        async def untainted() -> bool:
            return await taints(kube, hot) == [OWN]

        await wait_for(untainted, 60, what="the soft taint removed, the node's own kept")
