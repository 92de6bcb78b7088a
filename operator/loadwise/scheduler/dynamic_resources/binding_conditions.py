"""Binding conditions (kube-scheduler's DRADeviceBindingConditions, beta and on in 1.37): a
device whose driver must make it ready before a pod may use it (an accelerator attached over a
fabric) names `bindingConditions` in its allocation result; the driver reports them in the
claim's `status.devices`. PreBind waits until each is True (claim_binding.py); a True entry of
`bindingFailureConditions`, or the binding timeout since the allocation, makes the claim
unavailable to the pod (allocation.py: PostFilter may then deallocate it)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...framework.resource_claims import Claim


def binding_conditions(allocation: Mapping[str, Any]) -> bool:
    results = (allocation.get("devices") or {}).get("results") or ()
    return any(r.get("bindingConditions") for r in results)


def ready_for_binding(claim: Claim | None) -> bool | str:
    """isClaimReadyForBinding: True, False (not yet), or why binding failed."""
    if claim is None or claim.allocation is None:
        return False
    statuses = (claim.raw.get("status") or {}).get("devices") or ()
    for result in (claim.allocation.get("devices") or {}).get("results") or ():
        wanted = result.get("bindingConditions") or ()
        if not wanted:
            continue
        where = (result.get("driver"), result.get("pool"), result.get("device"))
        status = next(
            (d for d in statuses if (d.get("driver"), d.get("pool"), d.get("device")) == where),
            None,
        )
        if status is None:
            return False
        conditions = {c.get("type"): c for c in status.get("conditions") or ()}
        for failure in result.get("bindingFailureConditions") or ():
            failed = conditions.get(failure)
            if failed is not None and failed.get("status") == "True":
                return (
                    f"claim={claim.name}, reason={failed.get('reason', '')}, "
                    f"message={failed.get('message', '')!r}"
                )
        if any((conditions.get(c) or {}).get("status") != "True" for c in wanted):
            return False
    return True


def timed_out(claim: Claim, timeout: float, now: float | None = None) -> bool:
    """isClaimTimeout: devices with binding conditions allocated more than `timeout` ago."""
    allocation = claim.allocation
    if allocation is None or not binding_conditions(allocation):
        return False
    stamp = allocation.get("allocationTimestamp")
    if not isinstance(stamp, str):
        return False
    try:
        since = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return (time.time() if now is None else now) > since + timeout
