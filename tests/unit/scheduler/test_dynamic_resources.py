"""DynamicResources' PreEnqueue through the Scheduler: a pod naming ResourceClaims is held out
of the queue, never tried and counted as gated, until its claims exist; then it is queued and
tried (allocation itself: test_device_allocation.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY

from loadwise_dev import manifests

from ...fakes import until
from .test_scheduler import Api, raw_pod, running, scheduler, uid


def gated() -> float:
    return REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": "gated"}) or 0.0


def claim_event(name: str, owner_uid: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "namespace": "default",
        "name": name,
        "uid": f"claim-{name}",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner_uid, "controller": True}
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta, "spec": {"devices": {"requests": []}}}


def with_template_claim(raw: dict[str, Any], made: str | None = None) -> dict[str, Any]:
    pod = {**raw, "spec": {**raw["spec"]}}
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    if made is not None:
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": made}]}
    return pod


async def test_a_pod_waits_for_its_claim_then_is_queued_when_it_exists() -> None:
    api = Api()
    sched = scheduler(api)
    sched.on_node_event("ADDED", manifests.node("n1"))
    raw = with_template_claim(raw_pod("trainer"))
    async with running(sched):
        sched.on_pod_event("ADDED", raw)  # the controller has not made its claim yet
        await asyncio.sleep(0.1)
        assert uid(raw) not in sched.queue and gated() == 1
        assert sched.profile.why_held(uid(raw)) == (
            'DynamicResources: pod "default/trainer": ResourceClaim not created yet'
        )
        named = with_template_claim(raw, made="trainer-gpu-abcde")
        sched.on_pod_event("MODIFIED", named)  # named in its status, not yet seen
        assert sched.profile.why_held(uid(raw)) == (
            'DynamicResources: could not find ResourceClaim "default/trainer-gpu-abcde"'
        )
        sched.state.claims.on_event("ADDED", claim_event("trainer-gpu-abcde", "another-pod"))
        assert gated() == 1  # not its own claim: still held
        sched.state.claims.on_event("MODIFIED", claim_event("trainer-gpu-abcde", uid(raw)))
        assert gated() == 0
        await until(lambda: bool(api.events("FailedScheduling")))
    # queued and tried: the node has no devices
    assert api.events("FailedScheduling")[0]["message"] == (
        "0/1 nodes are available: 1 cannot allocate all claims."
    )
    assert not api.binds("trainer")


async def test_a_claim_being_deleted_holds_the_pod_and_unreadable_claims_hold_none() -> None:
    api = Api()
    sched = scheduler(api)
    raw = with_template_claim(raw_pod("trainer"), made="trainer-gpu")
    sched.state.claims.on_event("ADDED", claim_event("trainer-gpu", uid(raw), deleting=True))
    sched.on_pod_event("ADDED", raw)
    assert sched.profile.why_held(uid(raw)) == (
        'DynamicResources: resourceclaim "trainer-gpu" is being deleted'
    )
    sched.state.claims.relisted(set())  # gone unseen: still waited for
    assert gated() == 1
    sched.state.claims.unserved()  # the API cannot be read: no pod waits for what it cannot see
    assert gated() == 0 and uid(raw) in sched.queue
    other = with_template_claim(raw_pod("later"))
    sched.on_pod_event("ADDED", other)
    assert uid(other) in sched.queue
