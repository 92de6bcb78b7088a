"""PolicyWatch: SchedulingPolicy objects, listed before the first decision and then watched.

Through the same raw informer as pods and nodes, not kopf, for three reasons: the policies must
be known before the first decision (kopf's handlers ran after the scheduling loop had started,
so pending pods were placed with the built-in default after every restart); a CRD installed
after start-up must be picked up (kopf resolves resources once at start unless it may scan all
CRDs cluster-wide); and an API-server outage must not stop anything for good (kopf's timer task
died after its retries). Validation and status stay plain code (reporting.py writes statuses).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..degradations import Degradations
from ..kube.informer import Informer
from ..kube.transport import ApiError, Http
from .policy import GROUP, PLURAL, VERSION
from .policy_set import PolicySet

log = logging.getLogger(__name__)

POLICIES_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_RETRY = 5.0  # seconds between looks for a missing CRD


@dataclass
class PolicyObject:
    """What the reporter needs of one SchedulingPolicy object."""

    name: str
    uid: str
    generation: int
    status: Mapping[str, Any]
    finalizers: tuple[str, ...]
    error: str = ""  # why it is invalid; "" when valid


class PolicyWatch:
    def __init__(self, transport: Http, policies: PolicySet, degradations: Degradations) -> None:
        self.policies = policies  # the set the scheduler reads: applied and removed here
        self.degradations = degradations
        self.objects: dict[str, PolicyObject] = {}
        self.crd_present: bool | None = None  # None: not looked yet
        self.informer = Informer(transport, POLICIES_PATH, self.on_event, on_relisted=self.relisted)

    # --- events ------------------------------------------------------------------------------
    def on_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self.objects.pop(name, None)
            self.policies.remove(name)
            self._check_any_valid()
            return
        generation = int(meta.get("generation") or 0)
        known = self.objects.get(name)
        status = raw.get("status")
        obj = PolicyObject(
            name,
            str(meta.get("uid") or ""),
            generation,
            status if isinstance(status, Mapping) else {},
            tuple(meta.get("finalizers") or ()),
        )
        if known is not None and known.uid == obj.uid and known.generation == generation:
            # A status write or metadata change: the spec, and so the policy, is the same.
            obj.error = known.error
            self.objects[name] = obj
            return
        spec = raw.get("spec")
        try:
            if spec is not None and not isinstance(spec, Mapping):
                raise ValueError(f"spec: must be an object, not {type(spec).__name__}")
            self.policies.apply(name, spec)
        except ValueError as exc:
            obj.error = str(exc)
            log.warning("SchedulingPolicy %s is invalid and ignored: %s", name, exc)
        self.objects[name] = obj
        self._check_any_valid()

    def relisted(self, names: set[str]) -> None:
        for name in set(self.objects) - names:
            self.objects.pop(name, None)
            self.policies.remove(name)
        self._check_any_valid()

    def _check_any_valid(self) -> None:
        if not self.crd_present:
            return
        if len(self.policies) == 0:
            invalid = len(self.objects)
            extra = f" ({invalid} invalid one(s) ignored)" if invalid else ""
            self.degradations.set(
                "no_policy",
                f"no valid SchedulingPolicy exists{extra}: pods are scheduled with the built-in "
                "defaults",
            )
        else:
            self.degradations.clear("no_policy", "a valid SchedulingPolicy exists again")

    # --- lifecycle ---------------------------------------------------------------------------
    async def seed(self) -> None:
        """The first list, before any decision. A missing CRD is a degradation, not an error."""
        try:
            await self.informer.seed()
        except ApiError as exc:
            if exc.status != 404:
                raise
            self._crd_missing()
            return
        self._crd_found()

    async def run(self) -> None:
        while not self.crd_present:
            await asyncio.sleep(CRD_RETRY)
            try:
                await self.seed()
            except Exception as exc:  # the API server may be down too: look again later
                log.warning("listing SchedulingPolicies failed: %r", exc)
        await self.informer.run()

    def _crd_missing(self) -> None:
        if self.crd_present is not False:
            self.crd_present = False
            self.degradations.set(
                "crd_missing",
                f"the CustomResourceDefinition {CRD_NAME} is not installed: pods are scheduled "
                f"with the built-in defaults until it is (looking again every {CRD_RETRY:.0f}s)",
            )

    def _crd_found(self) -> None:
        was_missing = self.crd_present is False
        self.crd_present = True
        if was_missing:
            self.degradations.clear("crd_missing", f"{CRD_NAME} is installed: policies loaded")
        self._check_any_valid()
