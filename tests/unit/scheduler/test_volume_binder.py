"""VolumeBinding's Reserve, PreBind and Unreserve (scheduler/volumes/binder.py) against a fake
API: the writes kube-scheduler makes, the wait for the PV controller, and what a failure
leaves behind (assumptions dropped, nothing offered twice)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from loadwise.framework.plugins.volume_binding.pod_volumes import PodClaims, pod_claims
from loadwise.framework.types import parse_pod
from loadwise.scheduler.state import ClusterState
from loadwise.scheduler.volumes.binder import MERGE_PATCH, VolumeBinder, VolumeBindError

from ...fakes import FakeTransport
from ..framework.test_volumes import claim, cluster, local_pv, pod, storage_class


def binder(state: ClusterState, transport: FakeTransport, timeout: float = 0.5) -> VolumeBinder:
    return VolumeBinder(
        transport, state.storage, lambda uid: True, state.nodes.get, timeout=timeout, poll=0.01
    )


def versioned(version: str) -> Any:
    def handler(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Any:
        return 200, {"metadata": {"resourceVersion": version}}

    return handler


def plan_for(state: ClusterState, vb: VolumeBinder, raw: dict[str, Any], node: str) -> Any:
    parsed = parse_pod(raw)
    return parsed, vb.assume(parsed, node)


async def test_reserve_assumes_the_pv_so_no_other_claim_gets_it() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("d"), claim("e"))
    vb = binder(state, FakeTransport(versioned("2")))
    _, plan = plan_for(state, vb, pod("p", "d"), "a")
    assert [(v.name, c.name) for v, c in plan.bind] == [("pv-a", "d")]
    assumed = state.storage.volume("pv-a")
    assert assumed is not None and assumed.claim_ref is not None
    assert assumed.claim_ref.name == "d"
    # the same PV is not offered to the next claim
    other = parse_pod(pod("q", "e"))
    claims = pod_claims(other, state.storage)
    assert isinstance(claims, PodClaims)
    from loadwise.framework.plugins.volume_binding.pod_volumes import find_pod_volumes

    assert find_pod_volumes(other, claims, state.nodes["a"], state.storage) == [
        "node(s) didn't find available persistent volumes to bind"
    ]
    vb.revert(plan)
    claims = pod_claims(other, state.storage)
    assert isinstance(claims, PodClaims)
    assert find_pod_volumes(other, claims, state.nodes["a"], state.storage) != [
        "node(s) didn't find available persistent volumes to bind"
    ]


async def test_prebind_writes_the_claim_ref_then_waits_for_the_pv_controller() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("d"))
    transport = FakeTransport(versioned("5"))
    vb = binder(state, transport, timeout=5.0)
    parsed, plan = plan_for(state, vb, pod("p", "d"), "a")
    task = asyncio.create_task(vb.bind_volumes(parsed, "a", plan))
    await asyncio.sleep(0.05)
    (call,) = transport.requests("PATCH", "/persistentvolumes/pv-a")
    assert call.content_type == MERGE_PATCH
    assert call.body is not None
    assert call.body["spec"]["claimRef"]["name"] == "d"
    assert call.body["metadata"]["resourceVersion"] == "1"  # conditional on what was read
    assert call.body["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert not task.done()  # the claim is not bound yet
    # the PV controller's work arrives through the informers
    bound_pv = local_pv("pv-a", "a")
    bound_pv["metadata"]["resourceVersion"] = "6"
    bound_pv["spec"]["claimRef"] = {"namespace": "ns", "name": "d", "uid": "c-d"}
    state.storage.on_volume_event("MODIFIED", bound_pv)
    await asyncio.sleep(0.05)
    assert not task.done()
    bound_claim = claim("d", volume="pv-a")
    bound_claim["metadata"]["resourceVersion"] = "7"
    state.storage.on_claim_event("MODIFIED", bound_claim)
    await asyncio.wait_for(task, 1.0)


async def test_a_refused_write_restores_what_was_not_written() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("d"))

    def conflict(method: str, path: str, body: Any, params: Any) -> Any:
        return 409, {"message": 'Operation cannot be fulfilled on persistentvolumes "pv-a"'}

    vb = binder(state, FakeTransport(conflict))
    parsed, plan = plan_for(state, vb, pod("p", "d"), "a")
    with pytest.raises(VolumeBindError, match="Operation cannot be fulfilled"):
        await vb.bind_volumes(parsed, "a", plan)
    assert not state.storage.assumed_volumes  # offered again to the next cycle


async def test_a_provisioner_that_gives_up_fails_prebind() -> None:
    state = cluster(storage_class("dyn", provisioner="csi.example"), claim("d", "dyn"))
    transport = FakeTransport(versioned("3"))
    vb = binder(state, transport, timeout=5.0)
    parsed, plan = plan_for(state, vb, pod("p", "d"), "b")
    (provision,) = plan.provision
    assert provision.selected_node == "b"
    task = asyncio.create_task(vb.bind_volumes(parsed, "b", plan))
    await asyncio.sleep(0.05)
    (call,) = transport.requests("PATCH", "/persistentvolumeclaims/d")
    assert call.body == {
        "metadata": {
            "resourceVersion": "1",
            "annotations": {"volume.kubernetes.io/selected-node": "b"},
        }
    }
    given_up = claim("d", "dyn")
    given_up["metadata"]["resourceVersion"] = "4"  # the provisioner removed the annotation
    state.storage.on_claim_event("MODIFIED", given_up)
    with pytest.raises(VolumeBindError, match='provisioning failed for PVC "d"'):
        await asyncio.wait_for(task, 1.0)


async def test_claims_not_bound_in_time_fail_with_kube_schedulers_words() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("d"))
    vb = binder(state, FakeTransport(versioned("2")), timeout=0.05)
    parsed, plan = plan_for(state, vb, pod("p", "d"), "a")
    with pytest.raises(VolumeBindError, match="binding volumes: context deadline exceeded"):
        await vb.bind_volumes(parsed, "a", plan)


def test_an_assumed_pv_is_offered_to_its_own_claim_until_restored_or_seen_again() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("d"), claim("e"))
    vb = binder(state, FakeTransport(versioned("2")))
    _, plan = plan_for(state, vb, pod("p", "d"), "a")
    storage, node = state.storage, state.nodes["b"]  # not the PV's node: found by its claimRef
    own, other = storage.claim("ns", "d"), storage.claim("ns", "e")
    assert own is not None and other is not None
    assert [v.name for v in storage.candidate_volumes(own, node)] == ["pv-a"]
    assert storage.candidate_volumes(other, node) == []
    vb.revert(plan)
    assert storage.candidate_volumes(own, node) == []
    _, plan = plan_for(state, vb, pod("p", "d"), "a")
    assert [v.name for v in storage.candidate_volumes(own, node)] == ["pv-a"]
    storage.on_volume_event("MODIFIED", local_pv("pv-a", "a"))  # the API's version wins
    assert storage.candidate_volumes(own, node) == []


async def test_prebind_checks_again_when_its_claim_or_pv_changes_not_on_a_timer() -> None:
    """A poll of 30 s: only the informers' new versions can end the wait within a second."""
    state = cluster(storage_class(), local_pv("pv-a", "a"), local_pv("pv-b", "b"), claim("d"))
    vb = VolumeBinder(
        FakeTransport(versioned("5")), state.storage, lambda uid: True, state.nodes.get, poll=30
    )
    parsed, plan = plan_for(state, vb, pod("p", "d"), "a")
    task = asyncio.create_task(vb.bind_volumes(parsed, "a", plan))
    await asyncio.sleep(0.05)
    other = local_pv("pv-b", "b")  # an unrelated PV changes: the wait goes on
    other["metadata"]["resourceVersion"] = "9"
    state.storage.on_volume_event("MODIFIED", other)
    bound_pv = local_pv("pv-a", "a")
    bound_pv["metadata"]["resourceVersion"] = "6"
    bound_pv["spec"]["claimRef"] = {"namespace": "ns", "name": "d", "uid": "c-d"}
    state.storage.on_volume_event("MODIFIED", bound_pv)
    await asyncio.sleep(0.05)
    assert not task.done()  # the claim is not bound yet
    bound_claim = claim("d", volume="pv-a")
    bound_claim["metadata"]["resourceVersion"] = "7"
    state.storage.on_claim_event("MODIFIED", bound_claim)
    await asyncio.wait_for(task, 1.0)
    assert not vb._waiting  # nothing left registered


async def test_a_pod_deleted_while_prebind_waits_is_noticed_by_the_poll() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("d"))
    exists = {"yes": True}
    vb = VolumeBinder(
        FakeTransport(versioned("5")),
        state.storage,
        lambda uid: exists["yes"],
        state.nodes.get,
        poll=0.05,
    )
    parsed, plan = plan_for(state, vb, pod("p", "d"), "a")
    task = asyncio.create_task(vb.bind_volumes(parsed, "a", plan))
    await asyncio.sleep(0.1)
    assert not task.done()
    exists["yes"] = False  # no storage event tells of it
    with pytest.raises(VolumeBindError, match="pod does not exist any more"):
        await asyncio.wait_for(task, 1.0)
    assert not vb._waiting
