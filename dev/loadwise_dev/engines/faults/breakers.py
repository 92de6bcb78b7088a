"""The faults themselves: each breaks something (a process, a port, the network, an object) and
says when."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from ... import oddities
from ...cluster import wait_for
from ...kube import KubeError
from ...truth import meta, spec
from .env import Env
from .model import (
    NS,
    POLICIES,
    SCHEDULER,
    Fault,
    Settings,
)

log = logging.getLogger(__name__)


def _now_fault() -> Fault:
    t = time.monotonic()
    return Fault(t, t, time.time())


async def _kill_leader(env: Env, sig: int) -> Fault:
    holder = await env.lease_holder()
    leader = env.leader_replica(holder) or env.replicas[0]
    fault = _now_fault()
    fault.extra["old_leader"] = leader.identity
    fault.extra["lease_seen"] = holder is not None
    leader.signal(sig)
    env.retire(leader)
    others = {r.identity for r in env.replicas}

    async def new_holder() -> str | None:
        found = await env.lease_holder()
        return found if found in others else None

    async def exited() -> bool:
        if leader.alive:
            return False
        leader.exited_at = leader.exited_at or time.monotonic()
        return True

    try:
        await wait_for(exited, 30, interval=0.02, what="old leader exit")
    except TimeoutError:
        fault.extra["hung_after_signal"] = True
        leader.kill()
    fault.extra["old_exit_code"] = leader.returncode
    fault.extra["old_exit_s"] = (
        round(leader.exited_at - fault.start, 2) if leader.exited_at else None
    )
    try:
        await wait_for(new_holder, s_lease(env) + 15, interval=0.05, what="new lease holder")
        fault.extra["takeover_s"] = round(time.monotonic() - fault.start, 2)
        fault.extra["new_leader"] = await env.lease_holder()
    except TimeoutError:
        fault.extra["takeover_s"] = None
    fault.end = fault.start  # the fault is the kill itself
    return fault


def s_lease(env: Env) -> float:
    return env.settings.lease_duration


async def kill9(env: Env) -> Fault:
    fault = await _kill_leader(env, signal.SIGKILL)
    await env.add_replica()  # the Deployment starts a new pod
    return fault


async def sigterm(env: Env) -> Fault:
    fault = await _kill_leader(env, signal.SIGTERM)
    await env.add_replica()
    return fault


def _apiserver_down(
    seconds: Callable[[Settings], float], kill: bool = True
) -> Callable[[Env], Awaitable[Fault]]:
    """kill: SIGKILL (a crash; the outage window is exact). Otherwise SIGTERM, as a rolling
    restart stops it: kube-apiserver then drains for seconds before it exits; the down time
    counts from the signal."""

    async def inject(env: Env) -> Fault:
        fault = _now_fault()
        await asyncio.to_thread(env.cp.stop_apiserver, kill, 60.0)
        fault.extra["stopped_s"] = round(time.monotonic() - fault.start, 2)
        await asyncio.sleep(max(0.0, seconds(env.settings) - (time.monotonic() - fault.start)))
        ready = await asyncio.to_thread(env.cp.start_apiserver)
        fault.end = time.monotonic()
        fault.extra["apiserver_start_s"] = round(ready, 2)
        fault.extra["outage_s"] = round(fault.end - fault.start, 2)
        return fault

    return inject


async def prometheus_down(env: Env) -> Fault:
    assert env.prom_proxy is not None
    fault = _now_fault()
    env.prom_proxy.down()
    await asyncio.sleep(env.settings.prometheus_outage)
    env.prom_proxy.up()
    fault.end = time.monotonic()
    return fault


async def black_hole(env: Env) -> Fault:
    assert env.api_proxy is not None
    fault = _now_fault()
    env.api_proxy.black_hole()
    await asyncio.sleep(env.settings.black_hole)
    fault.extra["proxy_during"] = env.api_proxy.stats()
    env.api_proxy.restore()
    fault.end = time.monotonic()
    return fault


async def watch_gone(env: Env) -> Fault:
    """Operators cut off (refused); meanwhile bound pods are deleted and nodes replaced, etcd is
    compacted; then the operators reconnect from resourceVersions that no longer exist (410)."""
    assert env.api_proxy is not None
    k = env.k
    before = (await k.get(f"/api/v1/namespaces/{NS}/pods", limit="1"))["metadata"][
        "resourceVersion"
    ]
    fault = _now_fault()
    env.api_proxy.down()
    pods = [p for p in await k.list(f"/api/v1/namespaces/{NS}/pods") if spec(p).get("nodeName")]
    replaced = env.node_names[:2]
    doomed = [p for p in pods if spec(p)["nodeName"] in replaced]
    others = [p for p in pods if spec(p)["nodeName"] not in replaced]
    doomed += env.rng.sample(others, len(others) // 4)
    await asyncio.gather(*(k.delete_pod_now(NS, meta(p)["name"]) for p in doomed))
    for name in replaced:
        await env.cluster.remove_node(k, name)
    new_names = [f"{n}-new" for n in replaced]
    for name in new_names:
        await env.cluster.add_node(
            k, name, cpu_usage=0.2, mem_usage=0.3, cpu=str(env.settings.node_cpu),
            memory=f"{env.settings.node_memory_gi}Gi",
        )  # fmt: skip
    env.node_names = [n for n in env.node_names if n not in replaced] + new_names
    revision = await asyncio.to_thread(env.cp.compact_etcd)
    fault.extra.update(deleted_pods=len(doomed), replaced_nodes=replaced, compacted_at=revision)
    fault.extra["raw_watch_410"] = await raw_watch_status(env, before)
    env.api_proxy.up()
    fault.end = time.monotonic()
    return fault


async def raw_watch_status(env: Env, version: str) -> str:
    """What a watch from `version` gets now: 'HTTP 410', 'ERROR 410', or what else."""
    return await env.k.watch_status(f"/api/v1/namespaces/{NS}/pods", version)


async def restart_all(env: Env) -> Fault:
    fault = _now_fault()
    old = list(env.replicas)
    for replica in old:
        replica.signal(signal.SIGTERM)
    for replica in old:
        await asyncio.to_thread(replica.stop, 20.0)
        env.retire(replica)
    fault.extra["exit_codes"] = [r.returncode for r in old]
    await asyncio.sleep(env.settings.restart_gap)
    fault.extra["pending_at_restart"] = len((await env.truth(events=False)).pending_ours())
    for _ in old:
        await env.add_replica()
    fault.end = time.monotonic()
    return fault


async def crd_late(env: Env) -> Fault:
    # The fault began when the operators started without the CRD.
    started = min(r.started_at for r in env.replicas)
    fault = Fault(started, started, time.time() - (time.monotonic() - started))
    await env.install_policy_crd()
    fault.end = time.monotonic()
    return fault


async def policies_deleted(env: Env) -> Fault:
    fault = _now_fault()
    k = env.k
    names = [meta(p)["name"] for p in await k.list(POLICIES)]
    for name in names:
        with contextlib.suppress(KubeError):
            await k.delete(f"{POLICIES}/{name}")

    async def gone() -> bool:
        return not await k.list(POLICIES)

    try:
        await wait_for(gone, 20, interval=0.2, what="policies deleted")
        fault.extra["finalizers_stripped"] = False
    except TimeoutError:  # nobody removed kopf's finalizer: strip it, and say so
        for policy in await k.list(POLICIES):
            await k.merge_patch(
                f"{POLICIES}/{meta(policy)['name']}", {"metadata": {"finalizers": None}}
            )
        fault.extra["finalizers_stripped"] = True
        await wait_for(gone, 20, interval=0.2, what="policies deleted")
    fault.extra["deleted"] = names
    fault.end = time.monotonic()
    return fault


async def ports_released(env: Env) -> Fault:
    started = min(r.started_at for r in env.replicas)
    fault = Fault(started, started, time.time() - (time.monotonic() - started))
    env.release_ports()
    fault.end = time.monotonic()
    session = aiohttp.ClientSession()
    try:

        async def served() -> bool:
            answers = [await r.get(session, "/metrics") for r in env.replicas]
            return all(a is not None and a[0] == 200 for a in answers)

        try:
            await wait_for(served, 30, interval=0.2, what="metrics served")
            fault.extra["metrics_served_after_s"] = round(time.monotonic() - fault.end, 2)
        except TimeoutError:
            fault.extra["metrics_served_after_s"] = None
    finally:
        await session.close()
    return fault


async def no_fault(env: Env) -> Fault:
    return _now_fault()


async def odd_objects(env: Env) -> Fault:
    s = env.settings
    rng = env.rng
    k = env.k
    fault = _now_fault()
    counts: dict[str, int] = {}

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    for body in oddities.odd_nodes(rng, s.odd_nodes):
        try:
            await k.create("/api/v1/nodes", body)
            count("nodes created")
        except KubeError as exc:
            count(f"nodes refused {exc.status}")
    for body in oddities.odd_policies(rng, s.odd_policies):
        try:
            await k.create(POLICIES, body)
            count("policies created")
        except KubeError as exc:
            count(f"policies refused {exc.status}")
    for body in oddities.invalid_policies(s.invalid_policies):
        try:
            await k.create(POLICIES, body)
            count("invalid policies accepted")
        except KubeError as exc:
            count(f"invalid policies refused {exc.status}")
    pods = oddities.odd_pods(rng, s.odd_pods, NS)
    sem = asyncio.Semaphore(32)

    async def one(body: dict[str, Any]) -> None:
        ours = body["spec"]["schedulerName"] == SCHEDULER
        async with sem:
            ok = await env.create_pod(body, time.monotonic() + 60, count=ours)
        count("pods created" if ok else "pods refused")

    await asyncio.gather(*(one(b) for b in pods))
    fault.extra["odd"] = counts
    fault.end = time.monotonic()
    return fault
