"""DynamicResources' Reserve, PreBind and Unreserve (kube-scheduler v1.37.2): the devices the
allocator chose on the pod's node are taken in memory before the next pod's cycle, then written
into the claims before the Binding, and given back if the pod does not bind.

- Reserve: the allocations of the chosen node become in-flight (objects.py), so the next pods'
  filters see those devices as taken. Devices with binding conditions are refused here: waiting
  for them (kube-scheduler's PreBind waits up to 600 s) is not built.
- PreBind, for each claim not yet reserved for the pod, as `bindClaim` does: a claim being
  deleted, or one allocated by someone else meanwhile, fails the attempt; else the finalizer
  `resource.kubernetes.io/delete-protection` is added (an update), then `status.allocation`
  and the pod in `status.reservedFor` (a status update), each conditional on the claim's
  resourceVersion and retried from a fresh read on conflict (five tries, as RetryOnConflict).
- Extended resources backed by a DeviceClass: their claim is created first (extended.py), and
  once it is reserved the pod's status names it; Unreserve deletes it.
- Unreserve: the in-flight allocations are dropped; where PreBind already reserved the claim
  for the pod, the pod is removed from `reservedFor` (kube-scheduler's strategic merge patch),
  and the resourceclaim controller then clears the allocation: no claim stays allocated to a
  pod that did not bind. Until the informer shows that, the devices stay in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from ...framework.plugin import CycleState, PreBindPlugin, ReservePlugin
from ...framework.resource_claims import Claim
from ...framework.types import PodInfo
from ...kube.transport import Http
from .allocation import BINDING_TIMEOUT, DeviceAllocation
from .binding_conditions import binding_conditions as _binding_conditions
from .binding_conditions import ready_for_binding as _ready_for_binding
from .extended import IN_MEMORY, ExtendedClaim, create, delete, record_in_pod
from .objects import InFlight, exclusive_devices

log = logging.getLogger(__name__)

FINALIZER = "resource.kubernetes.io/delete-protection"
STRATEGIC = "application/strategic-merge-patch+json"
TRIES = 5  # retry.DefaultRetry's steps
POLL = 1.0  # how often the informer's claims are checked for binding conditions


class ClaimBindError(Exception):
    pass


@dataclass(slots=True)
class Reserved:
    claims: tuple[Claim, ...]
    allocations: dict[str, Mapping[str, Any]]  # claim uid -> what Reserve allocated
    written: dict[str, int] = field(default_factory=dict)  # claim uid -> resourceVersion
    as_written: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim uid -> object
    extended: ExtendedClaim | None = None  # the claim for extended resources, to create
    created: Claim | None = None  # that claim, once created
    described: str | None = None  # the devices, for the Scheduled event


def _path(claim: Claim) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{claim.namespace}/resourceclaims/{claim.name}"


class ClaimBinding(ReservePlugin, PreBindPlugin):
    name: ClassVar[str] = "DynamicResources"

    def __init__(
        self,
        transport: Http,
        allocation: DeviceAllocation,
        settle: float = 1.0,
        binding_timeout: float = BINDING_TIMEOUT,
    ) -> None:
        """`settle`: seconds to wait after writing devices on a pool another scheduler
        allocates on too, before checking none went to another claim meanwhile.
        `binding_timeout`: how long devices with binding conditions may take to be ready."""
        self.transport = transport
        self.allocation = allocation
        self.objects = allocation.objects
        self.settle = settle
        self.binding_timeout = binding_timeout
        self._tasks: set[asyncio.Task[None]] = set()

    # --- Reserve -----------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        if not self.allocation.applies(pod):
            return None
        prepared = self.allocation.prepared(pod)
        if prepared is None:
            return "the pod's claims were not prepared for this cycle"
        described = self.allocation.describe(pod, node)
        self.allocation.current = None  # used once
        allocations: dict[str, Mapping[str, Any]] = {}
        to_allocate = prepared.claims_for(node)
        if to_allocate:
            found = prepared.allocations(node)
            if found is None or len(found) != len(to_allocate):
                return "claim allocation not found for node"
            for claim, allocation in zip(to_allocate, found, strict=True):
                allocations[claim.uid] = allocation
            for uid, allocation in allocations.items():
                self.objects.inflight[uid] = InFlight(allocation)
        extended = prepared.extended_on(node)
        claims = prepared.claims if extended is None else (*prepared.claims, extended.claim)
        reserved = Reserved(claims, allocations, extended=extended, described=described)
        state.write(self.name, reserved)
        return None

    def reserved(self, state: CycleState) -> str | None:
        reserved: Reserved | None = state.read(self.name)
        return reserved.described if reserved is not None else None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        reserved: Reserved | None = state.read(self.name)
        if reserved is None:
            return
        for uid in reserved.allocations:
            written = reserved.written.get(uid)
            entry = self.objects.inflight.get(uid)
            if entry is None:
                continue
            if written is None:
                del self.objects.inflight[uid]
            else:  # held until the informer shows the write that undoes it
                entry.until_version = written
        created = reserved.created
        undo = [c for c in reserved.claims if c.uid in reserved.written and c is not created]
        if undo:
            self._spawn(self._unreserve(undo, pod))
        if created is not None:  # deleted; its devices in flight until then
            self._spawn(self._delete(created))
        self.objects.changed()

    def _spawn(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(write)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _delete(self, claim: Claim) -> None:
        await delete(self.transport, claim)
        self.objects.inflight.pop(claim.uid, None)
        self.objects.changed()

    async def _unreserve(self, claims: list[Claim], pod: PodInfo) -> None:
        for claim in claims:
            patch = {"metadata": {"uid": claim.uid}, "status": {"reservedFor": [
                {"$patch": "delete", "uid": pod.uid}
            ]}}  # fmt: skip
            try:
                status, data = await self.transport.request(
                    "PATCH", _path(claim) + "/status", patch, content_type=STRATEGIC
                )
                if status >= 300 and status != 404:
                    log.error("unreserve %s for %s: HTTP %d %s", claim.key, pod.key, status, data)
            except Exception as exc:
                log.error("unreserve %s for %s: %r", claim.key, pod.key, exc)

    # --- PreBind -----------------------------------------------------------------------------
    def allowance(self, state: CycleState) -> float:
        reserved: Reserved | None = state.read(self.name)
        if reserved is None or not reserved.claims:
            return 0.0
        waits = any(_binding_conditions(a) for a in reserved.allocations.values()) or any(
            c.allocation is not None and _binding_conditions(c.allocation) for c in reserved.claims
        )
        return 10.0 + self.settle + (self.binding_timeout if waits else 0.0)

    async def prebind(
        self, state: CycleState, pod: PodInfo, node: str, waiting: Callable[[], None]
    ) -> str | None:
        reserved: Reserved | None = state.read(self.name)
        if reserved is None:
            return None
        objects = self.objects
        for index, claim in enumerate(reserved.claims):
            if claim.name == IN_MEMORY:
                try:
                    claim = await self._create(reserved, index, claim)
                except Exception as exc:
                    return str(exc) if isinstance(exc, RuntimeError) else repr(exc)
            latest = objects.claims.by_key.get(claim.key, claim)
            if pod.uid in latest.reserved_for:
                continue
            allocation = reserved.allocations.get(claim.uid)
            if allocation is not None:
                other = objects.taken_by_other(exclusive_devices(allocation), claim.key)
                if other is not None:  # another scheduler took it since the filter
                    return f"device {other} was allocated meanwhile"
                objects.ours[claim.key] = claim.uid
            try:
                written = await self._bind_claim(latest, allocation, pod)
            except ClaimBindError as exc:
                return str(exc)
            except Exception as exc:  # the network: the pod retries after backoff
                return f"updating claim {claim.key}: {exc!r}"
            version = int((written.get("metadata") or {}).get("resourceVersion") or 0)
            reserved.written[claim.uid], reserved.as_written[claim.uid] = version, written
            if claim is reserved.created and reserved.extended is not None:
                failed = await record_in_pod(self.transport, pod, claim, reserved.extended)
                if failed is not None:
                    return failed
        error = await self._settled(reserved, waiting)
        if error is None and self.binding_timeout:
            error = await self._conditions_met(reserved, waiting)
        return error

    async def _create(self, reserved: Reserved, index: int, claim: Claim) -> Claim:
        """The claim for extended resources written, and known by its uid from now on."""
        assert reserved.extended is not None
        created = await create(self.transport, reserved.extended)
        reserved.created = created
        reserved.claims = (*reserved.claims[:index], created, *reserved.claims[index + 1 :])
        allocation = reserved.allocations.pop(claim.uid, None)
        entry = self.objects.inflight.pop(claim.uid, None)
        if allocation is not None:
            reserved.allocations[created.uid] = allocation
        if entry is not None:
            self.objects.inflight[created.uid] = entry
        return created

    async def _conditions_met(self, reserved: Reserved, waiting: Callable[[], None]) -> str | None:
        """kube-scheduler's wait for binding conditions: devices whose driver must make them
        ready first (an attached accelerator, a fabric) bind the pod only once each of their
        `bindingConditions` is True in the claim's `status.devices`; a True
        `bindingFailureConditions` entry, or the binding timeout since the allocation, fails
        the attempt (the pod is retried). Read from the informer, checked every POLL s."""
        known = self.objects.claims.by_key
        keys = [
            c.key
            for c in reserved.claims
            if _binding_conditions(
                reserved.allocations.get(c.uid)
                or getattr(known.get(c.key), "allocation", None)
                or {}
            )
        ]
        if not keys:
            return None
        waiting()
        deadline = time.monotonic() + self.binding_timeout
        while True:
            waiting_for = None
            for key in keys:
                claim = self.objects.claims.by_key.get(key)
                ready = _ready_for_binding(claim)
                if isinstance(ready, str):
                    return f"device binding failed: {ready}"
                if not ready:
                    waiting_for = key
            if waiting_for is None:
                return None
            if time.monotonic() >= deadline:
                return f"device binding timeout: claim={waiting_for.partition('/')[2]}"
            await asyncio.sleep(POLL)

    async def _settled(self, reserved: Reserved, waiting: Callable[[], None]) -> str | None:
        """On pools another scheduler allocates on too, two can hand out one device at once
        (DRA assumes one owner per node): after a moment for its writes to show, a device of
        ours that another claim holds is given back (Unreserve) and the pod retried."""
        mine = {
            c.key: exclusive_devices(a)
            for c in reserved.claims
            if (a := reserved.allocations.get(c.uid)) is not None and c.uid in reserved.written
        }
        devices = [d for v in mine.values() for d in v]
        if not self.settle or not self.objects.shared_with_others(devices):
            return None
        waiting()
        await asyncio.sleep(self.settle)
        for key, devices in mine.items():
            other = self.objects.taken_by_other(devices, key)
            if other is not None:
                log.warning("device %s was allocated twice; giving ours back (%s)", other, key)
                await self._undo(reserved)
                return f"device {other} was allocated twice, by another scheduler too: undone"
        return None

    async def _undo(self, reserved: Reserved) -> None:
        """Our allocations cleared at once (Unreserve only takes the pod out of `reservedFor`
        and leaves the rest to the resourceclaim controller: the retry would find the claim
        still allocated to the device given twice, and use it)."""
        for claim in reserved.claims:
            raw = reserved.as_written.get(claim.uid)
            if raw is None or claim.uid not in reserved.allocations:
                continue
            status = raw.get("status") or {}
            for key in ("reservedFor", "allocation", "devices"):
                status.pop(key, None)
            try:
                code, data = await self.transport.request("PUT", _path(claim) + "/status", raw)
            except Exception as exc:
                log.error("undoing %s: %r", claim.key, exc)
                continue
            if code < 300:
                version = orjson.loads(data).get("metadata", {}).get("resourceVersion")
                reserved.written[claim.uid] = int(version or reserved.written[claim.uid])
            else:
                log.warning("undoing %s: HTTP %d %s", claim.key, code, _message(data))

    async def _bind_claim(
        self, claim: Claim, allocation: Mapping[str, Any] | None, pod: PodInfo
    ) -> dict[str, Any]:
        """bindClaim: the claim as the API server answered, the pod reserved in it."""
        raw: dict[str, Any] = _copy(claim.raw)
        for attempt in range(TRIES):
            if attempt:
                raw = await self._read(claim)
            meta, status = raw.setdefault("metadata", {}), raw.setdefault("status", {})
            if meta.get("deletionTimestamp"):
                raise ClaimBindError(f"claim {claim.key} got deleted in the meantime")
            if allocation is not None:
                if status.get("allocation"):
                    raise ClaimBindError(
                        f"claim {claim.key} got allocated elsewhere in the meantime"
                    )
                finalizers = list(meta.get("finalizers") or ())
                if FINALIZER not in finalizers:
                    meta["finalizers"] = [*finalizers, FINALIZER]
                    code, data = await self.transport.request("PUT", _path(claim), raw)
                    if code == 409:
                        continue
                    if code >= 300:
                        why = _message(data)
                        raise ClaimBindError(f"add finalizer to claim {claim.key}: {why}")
                    raw = orjson.loads(data)
                    status = raw.setdefault("status", {})
                status["allocation"] = dict(allocation)
            if not status.get("allocation"):
                raise ClaimBindError(f"claim {claim.key} got deallocated elsewhere in the meantime")
            if allocation is not None and not status["allocation"].get("allocationTimestamp"):
                # only on an allocation of ours: an allocation once written is immutable
                # (kube-scheduler adds it to any claim lacking it, and then fails its update)
                status["allocation"]["allocationTimestamp"] = time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
                )
            consumer = {"resource": "pods", "name": pod.name, "uid": pod.uid}
            status["reservedFor"] = [*(status.get("reservedFor") or ()), consumer]
            code, data = await self.transport.request("PUT", _path(claim) + "/status", raw)
            if code == 409:
                continue
            if code >= 300:
                what = "allocation and reservation" if allocation is not None else "reservation"
                raise ClaimBindError(f"add {what} to claim {claim.key}: {_message(data)}")
            answered: dict[str, Any] = orjson.loads(data)
            return answered
        raise ClaimBindError(f"claim {claim.key}: still conflicting after {TRIES} tries")

    async def _read(self, claim: Claim) -> dict[str, Any]:
        code, data = await self.transport.request("GET", _path(claim))
        if code >= 300:
            raise ClaimBindError(f"get updated claim {claim.key} after conflict: {_message(data)}")
        found: dict[str, Any] = orjson.loads(data)
        return found


async def deallocate(transport: Http, claim: Claim) -> None:
    """DynamicResources' PostFilter write: the claim's allocation, reservations and device
    statuses cleared, conditional on the version the cycle saw (a newer one: left alone)."""
    raw = _copy(claim.raw)
    status = raw.setdefault("status", {})
    for key in ("reservedFor", "allocation", "devices"):
        status.pop(key, None)
    try:
        code, data = await transport.request("PUT", _path(claim) + "/status", raw)
    except Exception as exc:
        log.error("deallocating %s: %r", claim.key, exc)
        return
    if code >= 300:
        log.warning("deallocating %s: HTTP %d %s", claim.key, code, _message(data))
    else:
        log.info("deallocated %s, reserved for no pod, for a pod it kept off nodes", claim.key)


def _copy(raw: Mapping[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(raw))
    return copied


def _message(data: bytes) -> str:
    try:
        return str(orjson.loads(data).get("message") or data[:300])
    except (orjson.JSONDecodeError, AttributeError):
        return data[:300].decode(errors="replace")
