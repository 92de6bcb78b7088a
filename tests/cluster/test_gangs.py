"""Gangs end to end on the real control plane, GenericWorkload on (kube-apiserver,
kube-controller-manager): Kubernetes' own PodGroups and scheduler-plugins' coscheduling groups
(its published CRD). A gang is placed whole, off the hot node, or not at all; its members wait
silently for their PodGroup and minimum; the PodGroup is told."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import POLICIES, OperatorFactory
from .test_preemption import pod as victim_pod
from .test_preemption import preempted, priority_classes
from .util import events, wait_bound, wait_operator_metrics

pytestmark = pytest.mark.cluster

GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
COSCHEDULING_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"


async def create_members(
    kube: Kube, ns: str, group: str, names: list[str], cpu: str = "1", coscheduling: bool = False
) -> None:
    await asyncio.gather(
        *(
            kube.create(
                f"/api/v1/namespaces/{ns}/pods",
                manifests.in_group(manifests.pod(n, namespace=ns, cpu=cpu), group, coscheduling),
            )
            for n in names
        )
    )


async def condition(kube: Kube, ns: str, group: str) -> dict[str, Any] | None:
    raw = await kube.get(f"{GROUPS.format(ns=ns)}/{group}")
    found = [
        c
        for c in (raw.get("status") or {}).get("conditions") or ()
        if c["type"] == "PodGroupInitiallyScheduled"
    ]
    return found[0] if found else None


async def bound_names(kube: Kube, ns: str) -> set[str]:
    pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
    return {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}


async def test_a_gang_waits_for_its_podgroup_and_minimum_then_is_placed_whole_off_the_hot_node(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    usage = {"hot": 0.95, "cool-a": 0.1, "cool-b": 0.1}
    for node, cpu in usage.items():
        await local_cluster.add_node(kube, node, cpu_usage=cpu, cpu="4")
    await kube.create(POLICIES, manifests.policy("cpu", cpu=1, memory=0))
    await local_cluster.wait_metrics(usage)
    names = [f"w{i}" for i in range(6)]
    async with operator() as runtime:
        await wait_operator_metrics(runtime, usage)
        await create_members(kube, ns, "train", names[:5])
        await asyncio.sleep(3)  # no PodGroup yet: they wait, silently
        assert not await bound_names(kube, ns)
        assert not await events(kube, ns, reason="FailedScheduling")
        await kube.create(GROUPS.format(ns=ns), manifests.pod_group("train", ns, 6))
        await asyncio.sleep(3)  # 5 of 6 exist
        assert not await bound_names(kube, ns)
        explained = await _explain(f"{ns}/w0", local_cluster.operator_config())
        assert (
            "not queued yet, held by GangScheduling: waiting for minCount pods from a gang to "
            "appear in scheduling queue: "
            f"5 of 6 exist (pod group {ns}/train)"
        ) in explained, explained
        await create_members(kube, ns, "train", names[5:])
        nodes = await wait_bound(kube, ns, names)
        # 6 cpu on two cool nodes of 4: neither the hot node, nor one member left behind
        assert set(nodes.values()) == {"cool-a", "cool-b"}, nodes

        async def scheduled() -> dict[str, Any] | None:
            found = await condition(kube, ns, "train")
            return found if found and found["status"] == "True" else None

        found = await wait_for(scheduled, 15, what="PodGroupInitiallyScheduled=True")
        assert found["reason"] == "Scheduled"


async def test_a_gang_that_cannot_fit_holds_nothing_until_room_comes_then_is_placed_whole(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    await local_cluster.add_node(kube, "small", cpu="3")
    names = [f"b{i}" for i in range(4)]
    async with operator():
        await kube.create(GROUPS.format(ns=ns), manifests.pod_group("big", ns, 4))
        await create_members(kube, ns, "big", names)

        async def all_told() -> list[Any] | None:
            failed = await events(kube, ns, reason="FailedScheduling")
            return failed if {e["involvedObject"]["name"] for e in failed} == set(names) else None

        failed = await wait_for(all_told, 30, what="every member told")
        assert all(f"(pod group {ns}/big)" in e["message"] for e in failed)
        assert any(
            "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining" in e["message"]
            for e in failed
        )
        assert not await bound_names(kube, ns)  # three would fit: none is bound
        explained = await _explain(f"{ns}/b0", local_cluster.operator_config())
        assert (
            f"pod group {ns}/big (minimum 4, 0 scheduled): pod group is unschedulable, minCount "
            "(4) cannot be satisfied: 3 scheduled, 0 remaining"
        ) in explained, explained

        async def refused() -> dict[str, Any] | None:
            found = await condition(kube, ns, "big")
            return found if found and found["status"] == "False" else None

        found = await wait_for(refused, 15, what="PodGroupInitiallyScheduled=False")
        assert found["reason"] == "Unschedulable"
        await local_cluster.add_node(kube, "room", cpu="2")
        nodes = await wait_bound(kube, ns, names)  # the whole group, once it all fits
        assert "room" in nodes.values(), nodes


async def test_a_coscheduling_group_from_its_published_crd_is_placed_whole(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    await local_cluster.install_crd(kube, manifests.coscheduling_crd())
    await local_cluster.add_node(kube, "n1", cpu="8")
    names = [f"c{i}" for i in range(3)]
    async with operator():
        await create_members(kube, ns, "spark", names[:2], coscheduling=True)
        await kube.create(
            COSCHEDULING_GROUPS.format(ns=ns), manifests.coscheduling_group("spark", ns, 3)
        )
        await asyncio.sleep(3)  # 2 of 3
        assert not await bound_names(kube, ns)
        await create_members(kube, ns, "spark", names[2:], coscheduling=True)
        await wait_bound(kube, ns, names)

        async def phase() -> str | None:
            raw = await kube.get(f"{COSCHEDULING_GROUPS.format(ns=ns)}/spark")
            found = (raw.get("status") or {}).get("phase")
            return str(found) if found else None

        # Written by loadwise (no coscheduling controller runs here to go on to Running).
        assert await wait_for(phase, 15, what="the PodGroup's phase") == "Scheduling"


async def test_a_gang_preempts_lower_priority_pods_only_as_a_whole(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    await priority_classes(kube)
    for node in ("a", "b"):  # API objects only: a victim stays Terminating until deleted here
        await local_cluster.add_node(kube, node, cpu="2", kwok=False)
        low = victim_pod(ns, f"low-{node}", "2", "lw-low", node=node)  # graceful: 30 s
        await kube.create(f"/api/v1/namespaces/{ns}/pods", low)
    group = manifests.pod_group("urgent", ns, 2, priorityClassName="lw-high")
    await kube.create(GROUPS.format(ns=ns), group)
    names = ["u0", "u1"]
    async with operator():
        await asyncio.gather(
            *(
                kube.create(
                    f"/api/v1/namespaces/{ns}/pods",
                    manifests.in_group(
                        manifests.pod(n, namespace=ns, cpu="2", priority_class="lw-high"), "urgent"
                    ),
                )
                for n in names
            )
        )

        async def both_marked() -> bool:
            return all([await preempted(kube, ns, "low-a"), await preempted(kube, ns, "low-b")])

        await wait_for(both_marked, 30, what="both victims marked and deleted")
        for node in ("a", "b"):
            await kube.delete_pod_now(ns, f"low-{node}")  # their kubelet, standing in
        nodes = await wait_bound(kube, ns, names)
        assert sorted(nodes.values()) == ["a", "b"]
        preempting = await events(kube, ns, reason="Preempting")
        assert len(preempting) == 1
        assert "to make room for pod group" in preempting[0]["message"]
