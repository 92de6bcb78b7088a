"""e2e: rebalancing against the real control plane. The dry run: A ReplicaSet's pod (created by the
real controller-manager, placed by loadwise, run by KWOK) is placed on the cooler node; that
node then turns hot after placement (its background load and the pod's own use rise, as a
Flink TaskManager's does with its data). After `hotRefreshes` refreshes the leader posts a
WouldEvict event naming the node a replacement would take, and evicts nothing;
`loadwise explain node/NAME` says the same.

The nodes' usage is KWOK's, read through Prometheus with kube-prometheus-stack's preset queries
(loadwise_dev.kwok_usage): a node's background is a pod of its own, a pod's use is its KWOK usage
annotations."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise.runtime import Runtime
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube
from loadwise_dev.kwok import Kwok
from loadwise_dev.kwok_usage import KwokUsage

from .conftest import POLICIES, OperatorFactory
from .util import events, wait_event, wait_operator_metrics

pytestmark = pytest.mark.cluster


def replicaset(ns: str) -> dict[str, Any]:
    labels = {"app": "flink"}
    container = {
        "name": "taskmanager",
        "image": "flink",
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "taskmanager", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": "loadwise-scheduler",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


async def two_nodes(kube: Kube, local_cluster: LocalCluster, kw_b: float = 0.2) -> None:
    """Every test's two KWOK nodes: kw-a at 10% CPU (where the first pod goes) and kw-b, both
    measured before the operator starts."""
    await local_cluster.add_node(kube, "kw-a", cpu_usage=0.1, kwok=True)
    await local_cluster.add_node(kube, "kw-b", cpu_usage=kw_b, kwok=True)
    await local_cluster.wait_metrics({"kw-a": 0.1, "kw-b": kw_b})


def kwok_usage(local_cluster: LocalCluster) -> KwokUsage:
    assert local_cluster.usage is not None, "the session cluster's usage is KWOK's"
    return local_cluster.usage


async def hot(kube: Kube, local_cluster: LocalCluster, pod: dict[str, Any]) -> None:
    """The TaskManager's data grows: it uses 1.5 cores and kw-a's other load rises to 55%,
    92.5% of kw-a's 4 cores in all."""
    usage = kwok_usage(local_cluster)
    await usage.set_background(kube, "kw-a", 0.55, 0.1)
    await usage.set_pod(kube, pod, 1500, 256 << 20)


async def wait_event_or_why(
    kube: Kube, runtime: Runtime, ns: str, pod: str, reason: str, timeout: float = 60
) -> Any:
    """The event, or a failure that says what the operator saw and planned meanwhile (a full
    CI run once timed out here, with nothing to tell why)."""
    try:
        return await wait_event(kube, ns, pod, reason, timeout=timeout)
    except TimeoutError as exc:
        samples = runtime.scheduler.usage.caches["prometheus"].samples
        seen = {n: (round(s.cpu, 3), round(s.memory, 3)) for n, s in samples.items()}
        plans = [
            await runtime.rebalancer.plan(policy, "kw-a", time.time())
            for policy in runtime.scheduler.policies.policies()
        ]
        posted = [(e["reason"], e["message"]) for e in await events(kube, ns)]
        raise AssertionError(
            f"{exc}; leading {runtime.leading}; samples {seen}; plans for kw-a {plans}; "
            f"events in {ns} {posted}"
        ) from None


async def test_a_node_hot_after_placement_gets_a_would_evict_plan_and_nothing_is_evicted(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kwok: Kwok,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await two_nodes(kube, local_cluster)
    spec = {
        "podSelector": {"matchLabels": {"app": "flink"}},
        "rebalance": {"enabled": True, "hotRefreshes": 2, "coolRefreshes": 2},
    }
    policy = {"apiVersion": "loadwise.io/v1alpha1", "kind": "SchedulingPolicy"}
    await kube.create(POLICIES, {**policy, "metadata": {"name": "flink"}, "spec": spec})
    async with operator() as runtime:
        await wait_operator_metrics(runtime, {"kw-a": 0.1, "kw-b": 0.2})
        await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", replicaset(ns))

        async def running() -> dict[str, Any] | None:
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
            up = [p for p in pods if p["status"].get("phase") == "Running"]
            return up[0] if up else None

        pod = await wait_for(running, 60, interval=0.5, what="the TaskManager running")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == "kw-a"  # the cooler node when it was placed
        # Then its data grows: the pod uses 1.5 cores and the node's other load rises.
        await hot(kube, local_cluster, pod)
        try:
            event = await wait_event_or_why(kube, runtime, ns, name, "WouldEvict")
            assert event["message"].startswith("would evict from kw-a to relieve it (cpu ")
            assert (
                "over its hot thresholds for 2 refreshes): a replacement would go to kw-b"
                in (event["message"])
            )
            assert event["message"].endswith("policy flink, dry run")
            now = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            assert now["metadata"]["uid"] == uid and not now["metadata"].get("deletionTimestamp")

            monkeypatch.setenv("KUBECONFIG", str(local_cluster.cp.kubeconfig))
            config = local_cluster.operator_config()
            output = await _explain("node/kw-a", config)
            assert "node kw-a, policy flink: cpu 9" in output, output
            assert f"  would move {ns}/{name} -> kw-b" in output, output
            output = await _explain("node/kw-b", config)
            assert "node kw-b, policy flink: cpu 2" in output and "not relieved" in output, output
        finally:
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/taskmanager")


def evicting(name: str = "flink", **rebalance: Any) -> dict[str, Any]:
    settings = {"enabled": True, "mode": "Evict", "hotRefreshes": 2, "coolRefreshes": 2}
    return {
        "apiVersion": "loadwise.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": {"app": "flink"}},
            "rebalance": {**settings, **rebalance},
        },
    }


def workload(ns: str, name: str, cpu: str = "500m") -> dict[str, Any]:
    rs = replicaset(ns)
    rs["metadata"]["name"] = name
    labels = {"app": "flink", "job": name}
    rs["spec"]["selector"] = {"matchLabels": labels}
    rs["spec"]["template"]["metadata"]["labels"] = labels
    rs["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return rs


async def running_pods(kube: Kube, ns: str, job: str) -> list[dict[str, Any]]:
    pods = await kube.list(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"job={job}")
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


async def one_running(kube: Kube, ns: str, job: str, other_than: str = "") -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        up = [p for p in await running_pods(kube, ns, job) if p["metadata"]["uid"] != other_than]
        return up[0] if up else None

    return await wait_for(found, 60, interval=0.5, what=f"a running pod of {job}")


async def node_events(kube: Kube, node: str, reason: str) -> list[Any]:
    items = await kube.list("/api/v1/namespaces/default/events")
    return [
        e
        for e in items
        if e["involvedObject"].get("kind") == "Node"
        and e["involvedObject"]["name"] == node
        and e["reason"] == reason
    ]


async def test_a_node_that_stays_hot_is_relieved_and_the_replacement_takes_the_held_room(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kwok: Kwok,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Evict: the real Eviction API, the real ReplicaSet controller recreating the pod, KWOK
    completing the graceful deletion; the replacement is placed on the node the plan chose,
    both nodes and the pod say so, and the ledger ConfigMap holds the move."""
    await two_nodes(kube, local_cluster)
    await kube.create(POLICIES, evicting())
    async with operator(rebalance_evictions=True) as runtime:
        await wait_operator_metrics(runtime, {"kw-a": 0.1, "kw-b": 0.2})
        await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", workload(ns, "tm"))
        pod = await one_running(kube, ns, "tm")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == "kw-a"
        await hot(kube, local_cluster, pod)
        try:
            event = await wait_event_or_why(kube, runtime, ns, name, "Rebalanced")
            assert event["message"].startswith("evicted from kw-a to relieve it (cpu ")
            assert "its replacement has room held on kw-b" in event["message"]
            replacement = await one_running(kube, ns, "tm", other_than=uid)
            assert replacement["spec"]["nodeName"] == "kw-b"  # the room held for it
            gone = await kube.list(f"/api/v1/namespaces/{ns}/pods", labelSelector="job=tm")
            assert uid not in {p["metadata"]["uid"] for p in gone} or all(
                p["metadata"].get("deletionTimestamp") for p in gone if p["metadata"]["uid"] == uid
            )
            assert await node_events(kube, "kw-a", "Rebalanced")
            assert await node_events(kube, "kw-b", "Rebalanced")
            config = local_cluster.operator_config()
            ledger = await kube.get(
                f"/api/v1/namespaces/{config.election.lease_namespace}/configmaps/"
                f"{runtime.config.election.lease_name}-rebalance"
            )
            assert f'"uid":"{uid}"' in ledger["data"]["moves.json"]
            assert '"state":"evicted"' in ledger["data"]["moves.json"]
            monkeypatch.setenv("KUBECONFIG", str(local_cluster.cp.kubeconfig))
            explained = await _explain("node/kw-a", runtime.config)
            assert f"  moved {ns}/{name} off it to kw-b " in explained, explained
            left = re.search(r"its workload stays off it for (\d+)s more", explained)
            assert left is not None and 1600 < int(left.group(1)) < 1800, explained
            explained = await _explain("node/kw-b", runtime.config)
            assert f"  room for the replacement of {ns}/{name} (from kw-a, " in explained
        finally:
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/tm")


async def test_a_disruption_budget_keeps_the_pod_where_it_is(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kwok: Kwok,
) -> None:
    """The Eviction API refuses (429) while the pod's PodDisruptionBudget allows no disruption:
    the pod stays and says why; nothing is held or kept off. (Run without preemption, so the
    operator does not read budgets itself and the API server is the one that refuses.)"""
    await two_nodes(kube, local_cluster)
    await kube.create(POLICIES, evicting())
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "tm", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"job": "tm"}}},
    }
    await kube.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", budget)
    async with operator(preemption=False, rebalance_evictions=True) as runtime:
        await wait_operator_metrics(runtime, {"kw-a": 0.1, "kw-b": 0.2})
        await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", workload(ns, "tm"))
        pod = await one_running(kube, ns, "tm")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == "kw-a"  # the cooler node when it was placed
        await hot(kube, local_cluster, pod)
        try:
            event = await wait_event_or_why(kube, runtime, ns, name, "EvictionBlocked")
            assert "PodDisruptionBudget allows no disruption now" in event["message"]
            now = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            assert now["metadata"]["uid"] == uid and not now["metadata"].get("deletionTimestamp")
            assert not runtime.scheduler.state.moved_off
            assert not runtime.scheduler.preemption.nominated
        finally:
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/tm")


async def test_a_new_leader_neither_repeats_nor_forgets_the_moves_of_the_last(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kwok: Kwok,
) -> None:
    """Two workloads on kw-a; the first leader moves one off it (limits.perNodePerHour 1) and
    stops. kw-a stays hot and the second workload's pod could relieve it, but the next leader
    (on the same Lease) reads the ledger: the hour's one eviction from kw-a is spent, and the
    first workload is still kept off kw-a."""
    await two_nodes(kube, local_cluster, kw_b=0.7)
    await kube.create(POLICIES, evicting(limits={"perNodePerHour": 1}))
    lease = local_cluster.operator_config().election.lease_name
    usage = kwok_usage(local_cluster)
    try:
        async with operator(lease_name=lease, rebalance_evictions=True) as first:
            await wait_operator_metrics(first, {"kw-a": 0.1, "kw-b": 0.7})
            for job in ("tm", "jm"):
                await kube.create(
                    f"/apis/apps/v1/namespaces/{ns}/replicasets", workload(ns, job, cpu="100m")
                )
            tm, jm = await one_running(kube, ns, "tm"), await one_running(kube, ns, "jm")
            assert tm["spec"]["nodeName"] == jm["spec"]["nodeName"] == "kw-a"
            await usage.set_background(kube, "kw-b", 0.2, 0.1)
            await usage.set_background(kube, "kw-a", 0.3, 0.1)
            for pod, millis in ((tm, 1500), (jm, 1000)):
                await usage.set_pod(kube, pod, millis, 128 << 20)
            await wait_event_or_why(kube, first, ns, tm["metadata"]["name"], "Rebalanced")
            await usage.set_background(kube, "kw-a", 0.6, 0.1)  # and kw-a stays hot
        async with operator(lease_name=lease, rebalance_evictions=True) as second:

            async def led() -> bool | None:
                return (second.leading and second.scheduler.moves.loaded) or None

            await wait_for(led, 40, what="the second operator leading with the ledger read")
            owner = tm["metadata"]["ownerReferences"][0]["uid"]
            assert "kw-a" in second.scheduler.state.moved_off[owner]  # not forgotten
            policy = second.scheduler.policies.policies()[0]
            await asyncio.sleep(5)  # several refreshes: kw-a is hot at each
            relief = await second.rebalancer.plan(policy, "kw-a", time.time())
            assert "limits.perNodePerHour leaves 0" in relief.refused, relief
            assert not await events(kube, ns, jm["metadata"]["name"], "Rebalanced")  # not repeated
    finally:
        for job in ("tm", "jm"):
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/{job}")


async def test_a_brief_spike_and_a_node_with_nowhere_to_go_are_left_alone(
    kube: Kube,
    local_cluster: LocalCluster,
    ns: str,
    operator: OperatorFactory,
    kwok: Kwok,
) -> None:
    """Hysteresis: a few seconds hot is not hotRefreshes (12) refreshes in a row. No target:
    while the only other node is hot too, nothing moves and the plan says why. Once it cools,
    the node that stayed hot is relieved onto it."""
    await two_nodes(kube, local_cluster)
    await kube.create(POLICIES, evicting(hotRefreshes=12))
    usage = kwok_usage(local_cluster)
    async with operator(rebalance_evictions=True) as runtime:
        await wait_operator_metrics(runtime, {"kw-a": 0.1, "kw-b": 0.2})
        await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", workload(ns, "tm"))
        pod = await one_running(kube, ns, "tm")
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == "kw-a"
        await usage.set_pod(kube, pod, 1500, 256 << 20)
        try:
            await usage.set_background(kube, "kw-a", 0.55, 0.1)  # hot (92%) for three seconds
            await asyncio.sleep(3)
            await usage.set_background(kube, "kw-a", 0.1, 0.1)
            await asyncio.sleep(15)
            assert not await events(kube, ns, name, "Rebalanced")
            await usage.set_background(kube, "kw-b", 0.9, 0.1)  # now both stay hot
            await usage.set_background(kube, "kw-a", 0.55, 0.1)
            await local_cluster.wait_metrics({"kw-a": 0.925, "kw-b": 0.9})
            await asyncio.sleep(16)  # hotRefreshes and more
            policy = runtime.scheduler.policies.policies()[0]
            relief = await runtime.rebalancer.plan(policy, "kw-a", time.time())
            assert "every node it fits on would be hot" in relief.refused, relief
            assert not await events(kube, ns, name, "Rebalanced")
            await usage.set_background(kube, "kw-b", 0.2, 0.1)
            event = await wait_event_or_why(kube, runtime, ns, name, "Rebalanced", timeout=30)
            assert "its replacement has room held on kw-b" in event["message"]
        finally:
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/tm")
