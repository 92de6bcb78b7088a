"""Lifecycle against the real API server: policies known before the first decision, no policy at
all, leader election with a warm standby, and a new leader catching up on its predecessor's binds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loadwise.runtime import Runtime
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.controlplane import free_port
from loadwise_dev.kube import Kube

from .conftest import POLICIES, OperatorFactory
from .util import wait_bound, wait_event, wait_operator_metrics

pytestmark = pytest.mark.cluster

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


async def lease_events(kube: Kube, lease: str, reason: str) -> list[Any]:
    events = await kube.list("/api/v1/namespaces/default/events")
    return [
        e
        for e in events
        if e["involvedObject"].get("kind") == "Lease"
        and e["involvedObject"].get("name") == lease
        and e["reason"] == reason
    ]


async def test_policies_are_loaded_before_the_first_decision(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """Pods pending when the operator starts are placed under the user's policy, never the
    built-in default (it happened after every restart)."""
    await local_cluster.add_node(kube, "n1")
    await kube.create(POLICIES, manifests.policy("mine", cpu=1, memory=0))
    names = [f"early-{i}" for i in range(5)]
    for name in names:
        await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod(name, namespace=ns))
    async with operator():
        await wait_bound(kube, ns, names)
        for name in names:
            event = await wait_event(kube, ns, name, "Scheduled")
            assert event["message"].endswith("policy mine"), event["message"]


async def test_without_any_policy_metrics_refresh_and_the_degradation_is_visible(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """No SchedulingPolicy (after `kubectl delete schedpol --all`): node metrics are still
    refreshed and scoring stays load-aware; the state is a log line, a metric, a Warning event
    and readiness text; a new policy clears it."""
    await local_cluster.add_node(kube, "busy", cpu_usage=0.85)
    await local_cluster.add_node(kube, "idle", cpu_usage=0.1)
    await local_cluster.wait_metrics({"busy": 0.85, "idle": 0.1})
    async with operator() as runtime:
        await wait_operator_metrics(runtime, {"busy": 0.85, "idle": 0.1})
        lease = runtime.config.election.lease_name
        await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("p", namespace=ns))
        assert (await wait_bound(kube, ns, ["p"]))["p"] == "idle"
        message = (await wait_event(kube, ns, "p", "Scheduled"))["message"]
        assert "by metrics" in message and "policy (built-in default)" in message
        assert "no_policy" in runtime.degradations.active
        assert "no valid SchedulingPolicy" in runtime.readiness()[1]

        async def warned() -> list[Any]:
            return await lease_events(kube, lease, "NoPolicy")

        event = (await wait_for(warned, 20, what="NoPolicy event"))[0]
        assert event["type"] == "Warning"
        await kube.create(POLICIES, manifests.policy("back"))

        async def resolved() -> list[Any]:
            return await lease_events(kube, lease, "NoPolicyResolved")

        await wait_for(resolved, 20, what="NoPolicyResolved event")
        assert "no_policy" not in runtime.degradations.active


@contextlib.asynccontextmanager
async def replica(local_cluster: LocalCluster, lease: str, name: str) -> AsyncIterator[Runtime]:
    os.environ["KUBECONFIG"] = str(local_cluster.cp.kubeconfig)
    config = local_cluster.operator_config(
        lease_name=lease,
        identity=name,
        lease_duration=4.0,
        renew_deadline=3.0,
        retry_period=0.5,
    )
    runtime = await Runtime.start(config)
    try:
        yield runtime
    finally:
        await runtime.stop()


async def holder(kube: Kube, lease: str) -> str:
    return str((await kube.get(f"{LEASES}/{lease}"))["spec"].get("holderIdentity") or "")


async def test_one_leader_schedules_and_a_standby_takes_over_on_release(
    kube: Kube, local_cluster: LocalCluster, ns: str
) -> None:
    await local_cluster.add_node(kube, "n1")
    lease = f"election-{ns}"
    async with replica(local_cluster, lease, "a") as first:
        await wait_for(lambda: _true(first.leading), 10, what="first replica leading")
        async with replica(local_cluster, lease, "b") as second:
            await asyncio.sleep(1.5)  # several retry periods: b must stay a standby
            assert not second.leading and await holder(kube, lease) == "a"
            ready, why = second.readiness()
            assert ready and why.startswith("standby b, synced; leader a"), why
            await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("p1", namespace=ns))
            await wait_bound(kube, ns, ["p1"])
            event = await wait_event(kube, ns, "p1", "Scheduled")
            assert event["reportingInstance"] == "a"  # which replica bound it
            # The standby's state is warm: it already accounts the leader's bind.
            await wait_for(lambda: _true(len(pods_in(second, ns)) == 1), 10)

            loop = asyncio.get_running_loop()
            released = loop.time()
            await first.stop()  # graceful: the lease is released
            await wait_for(lambda: _true(second.leading), 10, interval=0.02, what="takeover")
            takeover = loop.time() - released
            assert takeover < 2.0, takeover  # the standby watches the lease: no expiry wait
            assert await holder(kube, lease) == "b"
            await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("p2", namespace=ns))
            await wait_bound(kube, ns, ["p2"])
            event = await wait_event(kube, ns, "p2", "Scheduled")
            assert event["reportingInstance"] == "b"


async def test_a_new_leader_catches_up_before_deciding(
    kube: Kube, local_cluster: LocalCluster, ns: str
) -> None:
    """kubernetes/kubernetes#137308: a standby whose watch has not delivered the old leader's
    last binds must not decide from that cache. The standby's pod events are dropped while the
    leader fills the node; after takeover the new leader lists pods first, so it over-commits
    nothing (without the list it binds `late` onto the full node)."""
    await local_cluster.add_node(kube, "n1", cpu="2", kwok=False)
    lease = f"catch-up-{ns}"
    async with replica(local_cluster, lease, "a") as first:
        await wait_for(lambda: _true(first.leading), 10, what="first replica leading")
        async with replica(local_cluster, lease, "b") as second:
            informer = second.pod_informer
            deliver = informer.on_event
            informer.on_event = lambda *_: None  # the standby's watch falls behind from here
            fill = [f"fill-{i}" for i in range(3)]
            for name in fill:
                body = manifests.pod(name, namespace=ns, cpu="600m")
                await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
            await wait_bound(kube, ns, fill)  # 1.8 of 2 CPUs taken by the leader
            await asyncio.sleep(0.5)  # their events reach the standby, and are lost there
            assert not pods_in(second, ns)  # the standby saw none of it
            informer.on_event = deliver
            await first.stop()
            await wait_for(lambda: _true(second.leading), 10, what="takeover")
            body = manifests.pod("late", namespace=ns, cpu="600m")
            await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
            await wait_event(kube, ns, "late", "FailedScheduling")
            pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/late")
            assert not pod["spec"].get("nodeName")  # 1.8 + 0.6 > 2: refused, not over-committed


def pods_in(runtime: Runtime, ns: str) -> list[str]:
    """The pods of the test's namespace a replica accounts (KWOK nodes have a background pod
    each, elsewhere)."""
    return [p.name for p in runtime.scheduler.state.pods.values() if p.namespace == ns]


async def _true(value: bool) -> bool:
    return value


async def test_a_taken_http_port_is_retried_reported_and_then_served(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """Start-up fails as a whole while the port is held (nothing runs half-started), says so in
    a StartupFailed Warning event, retries, and starts once the port is free."""
    await local_cluster.add_node(kube, "n1")
    port = free_port()
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
    starting = operator(http_port=port)
    entered = asyncio.ensure_future(starting.__aenter__())
    try:

        async def reported() -> list[Any]:
            events = await kube.list("/api/v1/namespaces/default/events")
            return [
                e for e in events if e["reason"] == "StartupFailed" and str(port) in e["message"]
            ]

        (event,) = await wait_for(reported, 30, what="StartupFailed event")
        assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Lease"
        assert not entered.done()  # no half-started runtime meanwhile
        held.close()
        runtime = await asyncio.wait_for(asyncio.shield(entered), 30)
        await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("p", namespace=ns))
        await wait_bound(kube, ns, ["p"])
        assert runtime.health() == (True, "ok")
    finally:
        held.close()
        if entered.done() and not entered.exception():
            await starting.__aexit__(None, None, None)
        else:
            entered.cancel()
