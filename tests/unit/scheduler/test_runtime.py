"""Runtime over the FakeTransport: the reconcile relist and the API probe (a silent network told
apart from a quiet cluster: connections dropped and every watch restarted, both ways)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from loadwise.config import Config
from loadwise.policies.policywatch import POLICIES_PATH
from loadwise.runtime import Runtime
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise_dev import manifests

from ...fakes import FakeTransport, Reply, until

NAME = "loadwise-scheduler"


def raw_pod(name: str, node: str = "") -> dict[str, Any]:
    raw = manifests.pod(name)
    raw["metadata"]["uid"] = f"uid-{name}"
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    raw["spec"]["nodeName"] = node
    return raw


@contextlib.asynccontextmanager
async def runtime(fake: FakeTransport, **settings: Any) -> AsyncIterator[Runtime]:
    config = Config.of(leader_elect=False, http_port=0, metrics_sources=(), **settings)
    scheduler = Scheduler(NAME, Binder(fake, NAME), {}, SchedulingQueue())
    api = client.ApiClient(client.Configuration())
    try:
        yield Runtime(config, api, fake, scheduler)
    finally:
        await api.close()


def listing(items: list[dict[str, Any]]) -> Reply:
    return 200, {"metadata": {"resourceVersion": "9"}, "items": items}


async def test_reconcile_drops_what_vanished_unseen_but_not_what_arrived_meanwhile() -> None:
    arrived = raw_pod("arrived", node="n1")

    def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        if path == "/api/v1/pods":
            scheduler.on_pod_event("ADDED", arrived)  # the watch, while the list is served
            return listing([raw_pod("kept", node="n1")])
        assert path == "/api/v1/nodes"
        return listing([manifests.node("n1")])

    fake = FakeTransport(api)
    async with runtime(fake) as rt:
        scheduler = rt.scheduler
        for name in ("n1", "n2"):
            scheduler.on_node_event("ADDED", manifests.node(name))
        scheduler.on_pod_event("ADDED", raw_pod("kept", node="n1"))
        scheduler.on_pod_event("ADDED", raw_pod("deleted-unseen", node="n2"))
        await rt.upkeep.reconcile()
        assert set(scheduler.state.pods) == {"uid-kept", "uid-arrived"}
        assert set(scheduler.state.nodes) == {"n1"}
    assert [c.path for c in fake.calls] == ["/api/v1/pods", "/api/v1/nodes"]


async def test_the_probe_drops_connections_and_restarts_watches_when_the_api_goes_and_returns() -> (
    None
):
    answers: list[Reply | BaseException] = [
        (200, b"ok"),
        aiohttp.ClientConnectionError("no route to host"),
        TimeoutError(),
        aiohttp.ClientConnectionError("no route to host"),
        (500, b"starting"),  # any answer: the server is there again
    ]

    async def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        assert (method, path) == ("GET", "/readyz")
        answer = answers.pop(0) if answers else (200, b"ok")
        if isinstance(answer, BaseException):
            raise answer
        return answer

    fake = FakeTransport(api)
    async with runtime(fake, api_probe_interval=0.02) as rt:
        informers = [*rt.informers, rt.policies.informer]
        tasks = [asyncio.create_task(i.run()) for i in informers]
        tasks.append(asyncio.create_task(rt.upkeep.probe_forever()))
        try:
            await until(lambda: len(fake.watches) == len(informers))  # idle watches
            await until(lambda: fake.resets == 1)
            assert "api_unreachable" in rt.degradations.active  # after two failed probes
            await until(lambda: fake.resets == 2)
            assert "api_unreachable" not in rt.degradations.active
            await until(lambda: len(fake.watches) == 3 * len(informers))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    paths = sorted(w.path for w in fake.watches)
    expected = [*(i.path for i in rt.informers), POLICIES_PATH]
    assert paths == sorted(expected * 3)  # every watch restarted at each transition
    assert [(n.type, n.reason) for n in rt.degradations.notices] == [
        ("Warning", "ApiServerUnreachable"),
        ("Normal", "ApiServerUnreachableResolved"),
    ]
    assert len(fake.calls) >= 5 and fake.resets == 2
