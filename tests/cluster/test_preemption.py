"""Preemption's main paths against the real control plane: a victim evicted for a pod of
higher priority, a PodDisruptionBudget respected where another node will do,
`preemptionPolicy: Never`, the nominated node held against a lower-priority pod, and no
preemption where only unresolvable nodes exist.

The nodes are API objects (`kwok=False`), with no kubelet: a victim deleted gracefully stays
Terminating until the test, standing in for its kubelet, force-deletes it. (On a KWOK node it
would go at a random moment of its grace period; test_real_nodes.py has a victim that
terminates through a real kubelet.)"""

from __future__ import annotations

from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError

from .conftest import OperatorFactory
from .util import events, wait_bound, wait_event

pytestmark = pytest.mark.cluster

CLASSES = {"lw-low": 10, "lw-mid": 500, "lw-high": 1000, "lw-high-never": 1000}


async def priority_classes(kube: Kube) -> None:
    for name, value in CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        if name.endswith("-never"):  # the Priority admission sets spec.preemptionPolicy
            body["preemptionPolicy"] = "Never"
        try:
            await kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)
        except KubeError as exc:
            if exc.status != 409:
                raise


def pod(ns: str, name: str, cpu: str, priority: str, node: str = "", **spec: Any) -> dict[str, Any]:
    body = manifests.pod(name, namespace=ns, cpu=cpu, priority_class=priority, labels={"app": name})
    body["spec"]["terminationGracePeriodSeconds"] = 30  # graceful: it stays Terminating
    if node:
        body["spec"]["nodeName"] = node
    body["spec"].update(spec)
    return body


async def create(kube: Kube, ns: str, body: dict[str, Any]) -> None:
    await kube.create(f"/api/v1/namespaces/{ns}/pods", body)


async def read(kube: Kube, ns: str, name: str) -> Any:
    return await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")


async def nominated(kube: Kube, ns: str, name: str) -> str:
    async def seen() -> str | None:
        node = (await read(kube, ns, name)).get("status", {}).get("nominatedNodeName")
        return str(node) if node else None

    node: str = await wait_for(seen, 30, what=f"{name} nominated")
    return node


async def preempted(kube: Kube, ns: str, name: str) -> bool:
    victim = await read(kube, ns, name)
    marked = any(
        c["type"] == "DisruptionTarget" and c.get("reason") == "PreemptionByScheduler"
        for c in victim.get("status", {}).get("conditions", [])
    )
    return marked and bool(victim["metadata"].get("deletionTimestamp"))


async def full_node(kube: Kube, local_cluster: LocalCluster, ns: str) -> None:
    """Node n1 (1 cpu) with "low" (600m, lw-low) on it: an 800m pod fits nowhere."""
    await local_cluster.add_node(kube, "n1", cpu="1", kwok=False)
    await create(kube, ns, pod(ns, "low", "600m", "lw-low", node="n1"))


@pytest.fixture
async def classes(kube: Kube) -> None:
    await priority_classes(kube)


async def test_a_victim_makes_room_and_the_preemptor_takes_it(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, classes: None
) -> None:
    await full_node(kube, local_cluster, ns)
    async with operator():
        await create(kube, ns, pod(ns, "vip", "800m", "lw-high"))
        assert await nominated(kube, ns, "vip") == "n1"
        assert await preempted(kube, ns, "low")
        event = await wait_event(kube, ns, "low", "Preempted")
        assert event["message"].startswith("Preempted by pod ")
        assert (
            "Preempting 1 pod(s) on node n1"
            in (await wait_event(kube, ns, "vip", "Preempting"))["message"]
        )
        await kube.delete_pod_now(ns, "low")  # its kubelet, confirming
        assert (await wait_bound(kube, ns, ["vip"]))["vip"] == "n1"


async def test_a_disruption_budget_is_respected_where_another_node_will_do(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, classes: None
) -> None:
    await local_cluster.add_node(kube, "n1", cpu="1", kwok=False)
    await local_cluster.add_node(kube, "n2", cpu="1", kwok=False)
    await create(kube, ns, pod(ns, "guarded", "600m", "lw-low", node="n1"))
    await create(kube, ns, pod(ns, "spare", "600m", "lw-mid", node="n2"))
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await kube.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", budget)

    async def counted() -> bool:  # the disruption controller's verdict: no disruption allowed
        got = await kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/guard")
        return got.get("status", {}).get("observedGeneration") is not None

    await wait_for(counted, 30, what="the budget's status")
    async with operator():
        # "guarded" has the lower priority, but evicting it would violate its budget.
        await create(kube, ns, pod(ns, "vip", "800m", "lw-high"))
        assert await nominated(kube, ns, "vip") == "n2"
        assert await preempted(kube, ns, "spare")
        assert not await preempted(kube, ns, "guarded")


async def test_never_does_not_preempt(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, classes: None
) -> None:
    await full_node(kube, local_cluster, ns)
    async with operator():
        await create(kube, ns, pod(ns, "polite", "800m", "lw-high-never"))
        failed = await wait_event(kube, ns, "polite", "FailedScheduling")
        assert failed["message"] == (
            "0/1 nodes are available: 1 Insufficient cpu. "
            "preemption: not eligible due to preemptionPolicy=Never."
        )
        assert not await preempted(kube, ns, "low")
        assert not (await read(kube, ns, "polite")).get("status", {}).get("nominatedNodeName")


async def test_the_nominated_node_is_held_against_a_lower_priority_pod(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, classes: None
) -> None:
    await full_node(kube, local_cluster, ns)
    async with operator():
        await create(kube, ns, pod(ns, "vip", "800m", "lw-high"))
        assert await nominated(kube, ns, "vip") == "n1"
        # 600m (terminating) + 300m fits n1, but not beside the 800m held for "vip".
        await create(kube, ns, pod(ns, "mid", "300m", "lw-mid"))
        await wait_event(kube, ns, "mid", "FailedScheduling")
        await kube.delete_pod_now(ns, "low")
        assert (await wait_bound(kube, ns, ["vip"]))["vip"] == "n1"
        mid = await read(kube, ns, "mid")
        assert not mid["spec"].get("nodeName")


async def test_no_preemption_when_only_unresolvable_nodes_exist(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, classes: None
) -> None:
    await local_cluster.add_node(kube, "gpu", cpu="1", kwok=False)
    await kube.merge_patch(
        "/api/v1/nodes/gpu",
        {"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}},
    )
    await create(kube, ns, pod(ns, "low", "600m", "lw-low", node="gpu"))
    async with operator():
        await create(kube, ns, pod(ns, "vip", "800m", "lw-high"))
        failed = await wait_event(kube, ns, "vip", "FailedScheduling")
        assert failed["message"] == (
            "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}. "
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        )
        assert not await preempted(kube, ns, "low")
        assert not await events(kube, ns, "low", "Preempted")


async def test_explain_shows_what_preemption_would_do_without_doing_it(
    kube: Kube, local_cluster: LocalCluster, ns: str, classes: None
) -> None:
    await full_node(kube, local_cluster, ns)
    await create(kube, ns, pod(ns, "vip", "800m", "lw-high"))  # no operator runs
    await create(kube, ns, pod(ns, "polite", "800m", "lw-high-never"))
    config = local_cluster.operator_config()
    output = await _explain(f"{ns}/vip", config)
    would = "preemption: would evict 1 pod(s) on n1 (0 disruption budget(s) violated)"
    assert f"{would}: {ns}/low" in output
    assert not await preempted(kube, ns, "low")
    never = await _explain(f"{ns}/polite", config)
    assert "preemption: none: not eligible due to preemptionPolicy=Never." in never
