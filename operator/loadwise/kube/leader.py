"""Leader election on a coordination.k8s.io Lease, with client-go's semantics and timings.

Our own elector rather than `kubernetes_asyncio.leaderelection` (36.x), which has no deadline on
a renew call (a hung request can outlive the lease), judges expiry by its own lease duration
instead of the record's, uses the wall clock, writes naive local times with a "Z", never
releases the lease and does not campaign again after losing it.

Rules (client-go's `LeaderElector`):
- a lease is free when it has no holder, or when its record has not changed for the record's
  `leaseDurationSeconds` as timed by *our* monotonic clock since we last saw it change (clocks
  of different machines are never compared);
- writes replace the Lease with its resourceVersion: of two candidates one wins, one gets 409;
- the leader renews every `retry_period`; if no renew succeeds for `renew_deadline` it stops
  leading at once (renew_deadline < lease_duration, so it has stopped before anyone else may
  take over); every call is bounded by the time left;
- on graceful shutdown the leader empties the holder, and a standby, which watches the Lease,
  takes over at once instead of waiting for expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson

from .. import observability as obs
from .transport import ApiError, Http

log = logging.getLogger(__name__)


def micro_time(when: float | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339, microseconds, UTC)."""
    moment = datetime.now(UTC) if when is None else datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration: float
    acquire_time: str
    renew_time: str
    transitions: int
    resource_version: str

    @classmethod
    def parse(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
        )


class LeaderElector:
    def __init__(
        self,
        transport: Http,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_elected: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_elected, self.on_lost = on_elected, on_lost
        self.clock = clock
        self.is_leader = False
        self.stopping = False  # set on shutdown: stepping down is then expected
        # Who held the lease when we took it: None when there was no lease at all, "" when it
        # had been released. A new leader catches up on its predecessor's binds unless None.
        self.acquired_from: str | None = ""
        self.observed: LeaseRecord | None = None
        self.observed_at = 0.0  # our monotonic time when `observed` last changed
        self._renewed_at = 0.0
        self._wake = asyncio.Event()

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def leader(self) -> str:
        """The holder as last seen ('' when none or unknown)."""
        return self.observed.holder if self.observed is not None else ""

    # --- the loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Campaign, lead until the lease is lost, campaign again; forever."""
        watcher = asyncio.create_task(self._watch(), name="loadwise-lease-watch")
        try:
            while True:
                await self._campaign()
                self._set_leader(True)
                try:
                    await self._renew_until_lost()
                finally:
                    self._set_leader(False)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _campaign(self) -> None:
        while True:
            if await self.try_acquire_or_renew(self.retry_period):
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # not wait_for: see queue.pop
                async with asyncio.timeout(self.retry_period):
                    await self._wake.wait()

    async def _renew_until_lost(self) -> None:
        self._renewed_at = self.clock()
        while True:
            await asyncio.sleep(self.retry_period)
            while True:
                left = self._renewed_at + self.renew_deadline - self.clock()
                if left <= 0:
                    log.error(
                        "leader election: %s could not renew lease %s/%s within %.0fs; "
                        "stopped leading",
                        self.identity,
                        self.namespace,
                        self.name,
                        self.renew_deadline,
                    )
                    return
                if await self.try_acquire_or_renew(min(left, self.retry_period)):
                    self._renewed_at = self.clock()
                    break
                if self.observed is not None and self.observed.holder not in ("", self.identity):
                    log.error("leader election: lease taken by %s", self.observed.holder)
                    return
                await asyncio.sleep(min(self.retry_period / 2, max(0.0, left)))

    def _set_leader(self, leading: bool, releasing: bool = False) -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        obs.LEADER.set(1 if leading else 0)
        if leading:
            log.info("leader election: %s is now the leader", self.identity)
            self.on_elected()
        else:
            level = logging.INFO if releasing or self.stopping else logging.WARNING
            log.log(level, "leader election: %s is no longer the leader", self.identity)
            self.on_lost()

    # --- one attempt -------------------------------------------------------------------------
    async def try_acquire_or_renew(self, budget: float) -> bool:
        """One get-and-replace of the Lease within `budget` seconds. True if we hold it."""
        try:
            async with asyncio.timeout(budget):
                return await self._try(budget)
        except (TimeoutError, aiohttp.ClientError, OSError, ApiError, ValueError) as exc:
            # ValueError: an answer that is not a Lease (e.g. a proxy's HTML page with a 200)
            log.debug("leader election attempt failed: %r", exc)
            return False

    async def _try(self, budget: float) -> bool:
        timeout = aiohttp.ClientTimeout(total=budget, connect=min(budget, 5.0))
        status, data = await self.transport.request("GET", self.path, timeout=timeout)
        now_wall = time.time()
        if status == 404:
            body = self._body(None, now_wall)
            status, data = await self.transport.request(
                "POST", self.path.rsplit("/", 1)[0], body, timeout=timeout
            )
            if status in (200, 201):
                if not self.is_leader:
                    self.acquired_from = None  # no lease: nobody was leading
                self._observe(_json(data))
                return True
            return False
        if status != 200:
            raise ApiError(status, data)
        current = LeaseRecord.parse(_json(data))
        self._observe_record(current)
        if (
            current.holder
            and current.holder != self.identity
            and self.clock() - self.observed_at < current.duration
        ):
            return False  # held by someone else, and renewed within its duration
        body = self._body(current, now_wall)
        status, data = await self.transport.request("PUT", self.path, body, timeout=timeout)
        if status == 200:
            if not self.is_leader:
                self.acquired_from = current.holder
            self._observe(_json(data))
            return True
        return False  # 409: someone else wrote first

    def _body(self, current: LeaseRecord | None, now_wall: float) -> dict[str, Any]:
        keep = current is not None and current.holder == self.identity
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current.resource_version
        transitions = 0 if current is None else current.transitions + (0 if keep else 1)
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": current.acquire_time if keep and current else micro_time(now_wall),
                "renewTime": micro_time(now_wall),
                "leaseTransitions": transitions,
            },
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        self._observe_record(LeaseRecord.parse(lease))

    def _observe_record(self, record: LeaseRecord) -> None:
        if record != self.observed:
            self.observed, self.observed_at = record, self.clock()

    async def release(self) -> None:
        """Give the lease up (graceful shutdown), so a standby need not wait for expiry."""
        record = self.observed
        if record is None or record.holder != self.identity:
            return
        self._set_leader(False, releasing=True)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": record.resource_version,
            },
            "spec": {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": micro_time(),
                "renewTime": micro_time(),
                "leaseTransitions": record.transitions,
            },
        }
        try:
            async with asyncio.timeout(self.retry_period):
                status, data = await self.transport.request("PUT", self.path, body)
            if status == 200:
                log.info("leader election: %s released the lease", self.identity)
            else:
                log.warning("releasing the lease failed: HTTP %s %s", status, data[:200])
        except Exception as exc:  # the lease then expires by itself
            log.warning("releasing the lease failed: %r", exc)

    # --- wake-ups: a standby sees a release or a change at once ------------------------------
    async def _watch(self) -> None:
        collection = self.path.rsplit("/", 1)[0]
        params = {"watch": "1", "fieldSelector": f"metadata.name={self.name}"}
        while True:
            try:
                params["timeoutSeconds"] = "60"
                async with self.transport.stream(collection, params, 75) as resp:
                    async for _ in resp.content:
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the campaign polls anyway; this only speeds it up
                log.debug("lease watch failed: %r", exc)
            await asyncio.sleep(self.retry_period)


def _json(data: bytes) -> dict[str, Any]:
    value = orjson.loads(data)
    return value if isinstance(value, dict) else {}
