"""The walking skeleton against a real kube-apiserver, controller-manager and Prometheus."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from loadwise.resources import to_amount
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError

from .conftest import POLICIES, OperatorFactory
from .util import events, wait_bound, wait_event, wait_operator_metrics

pytestmark = pytest.mark.cluster


async def create_pods(kube: Kube, ns: str, names: list[str], **spec: object) -> None:
    await asyncio.gather(
        *(
            kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod(n, namespace=ns, **spec))  # type: ignore[arg-type]
            for n in names
        )
    )


async def test_placement_follows_prometheus_and_policy_weights(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    # Below the default hot thresholds (80% cpu, 90% memory): only the weights decide.
    await local_cluster.add_node(kube, "cpu-busy", cpu_usage=0.7, mem_usage=0.1)
    await local_cluster.add_node(kube, "mem-busy", cpu_usage=0.1, mem_usage=0.7)
    await kube.create(POLICIES, manifests.policy("weights", cpu=10, memory=1))
    await local_cluster.wait_metrics({"cpu-busy": 0.7, "mem-busy": 0.1})
    async with operator() as runtime:
        await wait_operator_metrics(runtime, {"cpu-busy": 0.7, "mem-busy": 0.1})
        await create_pods(kube, ns, ["p1"])
        assert (await wait_bound(kube, ns, ["p1"]))["p1"] == "mem-busy"

        await kube.merge_patch(
            f"{POLICIES}/weights", {"spec": {"weights": {"cpu": 1, "memory": 10}}}
        )

        async def observed() -> bool:
            status = (await kube.get(f"{POLICIES}/weights")).get("status") or {}
            return status.get("observedGeneration") == 2

        await wait_for(observed, 15, what="policy generation 2 observed")
        await create_pods(kube, ns, ["p2"])
        assert (await wait_bound(kube, ns, ["p2"]))["p2"] == "cpu-busy"

        scheduled = await wait_event(kube, ns, "p1", "Scheduled")
        assert scheduled["message"].startswith(f"Successfully assigned {ns}/p1 to mem-busy")
        assert "by metrics" in scheduled["message"]
        assert scheduled["source"]["component"] == "loadwise-scheduler"
        policy = await kube.get(f"{POLICIES}/weights")
        conditions = {c["type"]: c["status"] for c in policy["status"]["conditions"]}
        assert conditions["Ready"] == "True"


async def test_pods_for_other_schedulers_are_never_touched(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    await local_cluster.add_node(kube, "n1")
    await create_pods(kube, ns, ["default-sched"], scheduler_name="default-scheduler")
    await create_pods(kube, ns, ["someone-else"], scheduler_name="someone-else")
    before = {
        p["metadata"]["name"]: p["metadata"]["resourceVersion"]
        for p in await kube.list(f"/api/v1/namespaces/{ns}/pods")
    }
    async with operator():
        await create_pods(kube, ns, ["ours"])
        await wait_bound(kube, ns, ["ours"])
        await asyncio.sleep(2)  # give a wrong scheduler time to misbehave
    for name in ("default-sched", "someone-else"):
        pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        assert not pod["spec"].get("nodeName")
        assert pod["metadata"]["resourceVersion"] == before[name]
        assert await events(kube, ns, name) == []


async def test_too_big_pod_waits_with_failed_scheduling_then_binds_on_new_node(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    await local_cluster.add_node(kube, "small", cpu="2")
    async with operator():
        await create_pods(kube, ns, ["big"], cpu="8")
        failed = await wait_event(kube, ns, "big", "FailedScheduling")
        assert failed["message"] == "0/1 nodes are available: 1 Insufficient cpu."
        assert failed["type"] == "Warning"

        async def condition() -> dict[str, str] | None:
            pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/big")
            conditions = (pod.get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "PodScheduled"), None)

        scheduled = await wait_for(condition, 15, what="PodScheduled condition")
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")

        await asyncio.sleep(3)  # retries with the same outcome must not flood events
        assert len(await events(kube, ns, "big", "FailedScheduling")) == 1

        await local_cluster.add_node(kube, "large", cpu="16")
        placed = await wait_bound(kube, ns, ["big"], timeout=10)
        assert placed["big"] == "large"


async def test_burst_never_overcommits_allocatable(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    for name in ("b1", "b2", "b3"):
        await local_cluster.add_node(kube, name, cpu="2", memory="4Gi", cpu_usage=0.1)
    names = [f"burst-{i}" for i in range(40)]
    async with operator(bind_concurrency=16):
        await create_pods(kube, ns, names, cpu="300m", memory="128Mi")

        async def settled() -> list[dict[str, Any]] | None:
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
            bound = [p for p in pods if p["spec"].get("nodeName")]
            failed = {
                e["involvedObject"]["name"]
                for e in await events(kube, ns, reason="FailedScheduling")
            }
            return bound if len(bound) == 18 and len(failed) == 22 else None

        bound = await wait_for(settled, 60, what="18 bound and 22 unschedulable")
    per_node: dict[str, int] = defaultdict(int)
    for pod in bound:
        per_node[str(pod["spec"]["nodeName"])] += to_amount("cpu", "300m")
    assert all(cpu <= 2000 for cpu in per_node.values()), per_node
    scheduled = await events(kube, ns, reason="Scheduled")
    assert sorted(e["involvedObject"]["name"] for e in scheduled) == sorted(
        p["metadata"]["name"] for p in bound
    ), "each bound pod has exactly one Scheduled event: none bound twice"


@pytest.mark.parametrize(
    ("weights", "status", "expected"),
    [
        ({"cpu": -1}, 422, "spec.weights.cpu"),
        ({"cpu": "lots"}, 422, "spec.weights.cpu"),
        ({"cpu": 0, "memory": 0}, 422, "at least one of weights.cpu and weights.memory"),
        ({"cpu": 1, "disk": 2}, 400, 'unknown field "spec.weights.disk"'),
    ],
)
async def test_invalid_policies_are_refused_by_the_api_server(
    kube: Kube, clean: None, weights: dict[str, object], status: int, expected: str
) -> None:
    body = manifests.policy("bad")
    body["spec"]["weights"] = weights
    with pytest.raises(KubeError) as info:
        # kubectl's default: unknown fields are errors, not silently dropped.
        await kube.create(POLICIES, body, fieldValidation="Strict")
    assert info.value.status == status  # 422: schema; 400: strict decoding of unknown fields
    assert expected in str(info.value)


async def test_no_writes_to_pods_but_binding_and_status(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    # An API-object node: no kubelet (KWOK's included) writes the pods' status, so every writer
    # left is the creator or loadwise (KWOK wrote status 1-5 s after binding, sometimes in time).
    await local_cluster.add_node(kube, "n1", kwok=False)
    names = [f"quiet-{i}" for i in range(5)]
    async with operator():
        await create_pods(kube, ns, names)
        await wait_bound(kube, ns, names)
        await asyncio.sleep(1)
    for pod in await kube.list(f"/api/v1/namespaces/{ns}/pods"):
        meta = pod["metadata"]
        assert not meta.get("annotations"), meta.get("annotations")
        assert not meta.get("finalizers")
        # Who wrote the pod: its creator and the binding (subresource), nobody else.
        writers = {(m["manager"], m.get("subresource", "")) for m in meta["managedFields"]}
        assert all(sub in ("", "binding") for _, sub in writers), writers
    node = await kube.get("/api/v1/nodes/n1")
    assert not any("kopf" in k for k in (node["metadata"].get("annotations") or {}))
    assert not node["metadata"].get("finalizers")


async def test_deployment_pods_are_scheduled(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """kube-controller-manager turns a Deployment into pods, as in a real cluster."""
    await local_cluster.add_node(kube, "n1")
    await local_cluster.add_node(kube, "n2")
    template = manifests.pod("unused", namespace=ns)
    template["metadata"] = {"labels": {"app": "web"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    async with operator():
        await kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)

        async def all_bound() -> bool:
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods", labelSelector="app=web")
            return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)

        await wait_for(all_bound, 60, what="deployment pods bound")


async def test_dead_metrics_source_degrades_to_requests(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    await local_cluster.add_node(kube, "n1")
    await kube.create(POLICIES, manifests.policy("default"))
    async with operator(prometheus_url="http://127.0.0.1:9") as runtime:
        await create_pods(kube, ns, ["p"])
        await wait_bound(kube, ns, ["p"])
        assert runtime.scheduler.usage.caches["prometheus"].last_error is not None
    event = await wait_event(kube, ns, "p", "Scheduled")
    assert "by requests" in event["message"]
