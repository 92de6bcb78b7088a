"""The Lease elector's rules, against an in-memory Lease endpoint with the API server's
optimistic concurrency (resourceVersion, 409). The real API server path is covered by
tests/cluster/test_lifecycle.py; here time is controlled, so expiry rules are exact."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from loadwise.kube.leader import LeaderElector, micro_time

from ...fakes import HANG, FakeTransport, Reply, forever, until

PATH = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lw"


class LeaseServer:
    """GET/POST/PUT of one Lease; PUT needs the current resourceVersion. `hang` stalls calls.
    Served through the FakeTransport (`transport`); its watch stays silent: the campaign polls."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.hang = False
        self.writes: list[dict[str, Any]] = []
        self.transport = FakeTransport(self.handle)

    async def handle(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        if self.hang:
            await forever()
        if method == "GET":
            assert path == PATH
            if self.lease is None:
                return 404, {}
            return 200, self.lease
        assert body is not None
        if method == "POST":
            assert path == PATH.rsplit("/", 1)[0]
            if self.lease is not None:
                return 409, {}
        elif self.lease is None or body["metadata"].get("resourceVersion") != str(self.version):
            return 409, {}
        self.version += 1
        self.lease = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
        }
        self.writes.append(self.lease)
        return (201 if method == "POST" else 200), orjson.loads(orjson.dumps(self.lease))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(server: LeaseServer, identity: str, clock: Clock | None = None, **kw: Any) -> Any:
    return LeaderElector(server.transport, "ns", "lw", identity, clock=clock or Clock(), **kw)


async def test_first_candidate_creates_the_lease_and_the_record_is_client_go_s() -> None:
    server = LeaseServer()
    a = elector(server, "a", lease_duration=15)
    assert await a.try_acquire_or_renew(1.0)
    spec = server.lease["spec"] if server.lease else {}
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert a.acquired_from is None  # created: nobody led before, no catch-up list needed
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", spec["renewTime"])
    assert spec["leaseTransitions"] == 0


async def test_expiry_is_judged_by_the_records_duration_on_our_own_clock() -> None:
    server = LeaseServer()
    assert await elector(server, "a", lease_duration=15).try_acquire_or_renew(1.0)
    clock = Clock()
    b = elector(server, "b", clock, lease_duration=5)  # b's own setting must not matter
    assert not await b.try_acquire_or_renew(1.0)  # first sight: the record starts its clock
    clock.now += 14.9
    assert not await b.try_acquire_or_renew(1.0)  # the record says 15 s
    clock.now += 0.2
    assert await b.try_acquire_or_renew(1.0)
    spec = server.lease["spec"] if server.lease else {}
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert b.acquired_from == "a"  # b lists pods before deciding: a's last binds


async def test_a_renewed_record_restarts_the_expiry_clock() -> None:
    server = LeaseServer()
    a = elector(server, "a")
    clock = Clock()
    b = elector(server, "b", clock)
    assert await a.try_acquire_or_renew(1.0)
    assert not await b.try_acquire_or_renew(1.0)
    clock.now += 10
    assert await a.try_acquire_or_renew(1.0)  # a renews: the record changes
    assert not await b.try_acquire_or_renew(1.0)
    clock.now += 10  # 20 s since first sight, 10 since the renewal was seen
    assert not await b.try_acquire_or_renew(1.0)


async def test_every_call_is_bounded_by_the_budget() -> None:
    server = LeaseServer()
    assert await elector(server, "a").try_acquire_or_renew(0.7)
    assert [(c.method, c.timeout and c.timeout.total) for c in server.transport.calls] == [
        ("GET", 0.7),
        ("POST", 0.7),
    ]


async def test_an_answer_that_is_not_a_lease_is_a_failed_attempt_not_the_end() -> None:
    server = LeaseServer()
    odd = FakeTransport(lambda method, path, body, params: (200, b"<html>a proxy</html>"))
    lost = asyncio.Event()
    a = LeaderElector(
        odd, "ns", "lw", "a", lease_duration=1.0, renew_deadline=0.4, retry_period=0.05
    )
    assert not await a.try_acquire_or_renew(1.0)
    task = asyncio.create_task(a.run())
    try:
        await until(lambda: len(odd.calls) >= 3)  # campaigning on, not dead
        assert not task.done() and not a.is_leader
        odd.handler = server.handle  # the API server is reachable again
        await until(lambda: a.is_leader)
        a.on_lost = lost.set
        odd.handler = lambda method, path, body, params: (200, b"not json")
        await asyncio.wait_for(lost.wait(), 2.0)  # renewals fail: it stops leading in time
        await until(lambda: len(odd.calls) >= 20)
        assert not task.done()  # and campaigns again
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_of_two_writers_one_wins() -> None:
    server = LeaseServer()
    a, b = elector(server, "a"), elector(server, "b")
    results = await asyncio.gather(a.try_acquire_or_renew(1.0), b.try_acquire_or_renew(1.0))
    assert sorted(results) == [False, True]


async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline() -> None:
    server = LeaseServer()
    lost = asyncio.Event()
    a = LeaderElector(
        server.transport,
        "ns",
        "lw",
        "a",
        lease_duration=1.0,
        renew_deadline=0.4,
        retry_period=0.1,
        on_lost=lost.set,
    )
    task = asyncio.create_task(a.run())
    try:
        for _ in range(50):
            if a.is_leader:
                break
            await asyncio.sleep(0.02)
        assert a.is_leader
        loop = asyncio.get_running_loop()
        server.hang = True  # every call now hangs: each must be cut at the deadline
        stalled = loop.time()
        await asyncio.wait_for(lost.wait(), 2.0)
        assert loop.time() - stalled < 0.4 + 0.1 + 0.1  # deadline + one retry + slack
        assert not a.is_leader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_release_lets_a_standby_take_over_without_waiting_for_expiry() -> None:
    server = LeaseServer()
    a = elector(server, "a")
    assert await a.try_acquire_or_renew(1.0)
    a.is_leader = True
    clock = Clock()
    b = elector(server, "b", clock)
    assert not await b.try_acquire_or_renew(1.0)
    await a.release()
    assert server.lease is not None and server.lease["spec"]["holderIdentity"] == ""
    assert await b.try_acquire_or_renew(1.0)  # no clock advance needed
    assert b.acquired_from == ""  # released: b still catches up on a's last binds


async def test_release_by_a_replica_that_does_not_hold_the_lease_writes_nothing() -> None:
    server = LeaseServer()
    assert await elector(server, "a").try_acquire_or_renew(1.0)
    b = elector(server, "b")
    assert not await b.try_acquire_or_renew(1.0)
    writes = len(server.writes)
    await b.release()
    assert len(server.writes) == writes


async def test_a_standby_takes_over_when_its_lease_watch_shows_the_release() -> None:
    server = LeaseServer()
    a = elector(server, "a")
    assert await a.try_acquire_or_renew(1.0)
    a.is_leader = True
    released = asyncio.Event()
    collection = PATH.rsplit("/", 1)[0]
    server.transport.streams[collection] = [[released, {"type": "MODIFIED", "object": {}}, HANG]]
    elected = asyncio.Event()
    b = LeaderElector(server.transport, "ns", "lw", "b", retry_period=30.0, on_elected=elected.set)
    task = asyncio.create_task(b.run())
    try:
        await until(lambda: b.observed is not None)  # b found the lease held by a
        await asyncio.sleep(0.01)
        assert not elected.is_set()
        await a.release()
        released.set()  # the watch delivers the change; polling alone would take 30 s
        await asyncio.wait_for(elected.wait(), 1.0)
        watch = server.transport.watches[0]
        assert watch.path == collection
        assert (watch.params or {})["fieldSelector"] == "metadata.name=lw"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("when", [0.0, 1_700_000_000.123456])
def test_micro_time_is_utc_with_microseconds(when: float) -> None:
    assert micro_time(when).endswith("Z") and len(micro_time(when)) == 27
