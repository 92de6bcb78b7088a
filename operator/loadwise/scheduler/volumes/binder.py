"""VolumeBinder: VolumeBinding's Reserve, PreBind and Unreserve (kube-scheduler's
volumebinding/binder.go), for a pod whose claims wait for the scheduler: the plugin's half that
writes, registered by the scheduler beside its Filter (framework/plugins/volume_binding/).

- Reserve (synchronous, in the scheduling cycle): the plan for the chosen node is computed from
  the same state the Filter saw, and assumed: each PV to bind shows its claimRef, each claim to
  provision the `volume.kubernetes.io/selected-node` annotation, so the next cycles neither
  offer that PV to another claim nor provision the claim elsewhere.
- PreBind (in the binding task, before the Binding): the PV updates (claimRef, with
  `pv.kubernetes.io/bound-by-controller`), then the claim annotations, each conditional on the
  resourceVersion the plan was made from; then it waits until the PV controller
  (kube-controller-manager) or a provisioner has bound every claim, up to the bind timeout
  (600 s, kube-scheduler's default). It checks again whenever the informers bring a new version
  of one of its claims or PVs, and once a second besides, as kube-scheduler does (a pod or node
  deleted meanwhile).
- Unreserve: the assumed versions are dropped, so the cache shows the API's objects again.
  Like kube-scheduler, writes that landed are not rolled back: a PV whose claimRef was set is
  bound to that claim by the PV controller (which, for a pre-bound PV, is the only binding it
  may make), and a provisioner that failed removes the annotation itself. No claim is left
  bound to two volumes, nor a PV to two claims.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from ...framework.plugin import CycleState, PreBindPlugin, ReservePlugin
from ...framework.plugins.volume_binding.pod_volumes import (
    PodClaims,
    VolumeError,
    VolumePlan,
    find_pod_volumes,
    pod_claims,
)
from ...framework.storage import BOUND_BY_CONTROLLER, SELECTED_NODE, Claim, ClaimRef, Volume
from ...framework.types import NodeInfo, PodInfo
from ...kube.transport import Http
from ..multimaps import discard
from .storage_state import StorageState

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
BIND_TIMEOUT = 600.0  # VolumeBindingArgs.BindTimeoutSeconds' default
POLL = 1.0  # kube-scheduler checks its informers every 1 s; we check on their events too


class VolumeBindError(Exception):
    """PreBind failed: the pod is retried after backoff (its message is the event's)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Written:
    """What PreBind wrote: per object, the resourceVersion the API server answered with."""

    volumes: dict[str, int]
    claims: dict[str, int]


class VolumeBinder(ReservePlugin, PreBindPlugin):
    name = "VolumeBinding"

    def __init__(
        self,
        transport: Http,
        storage: StorageState,
        pod_exists: Callable[[str], bool],
        node_of: Callable[[str], NodeInfo | None],
        timeout: float = BIND_TIMEOUT,
        poll: float = POLL,
    ) -> None:
        self.transport = transport
        self.storage = storage
        self.pod_exists = pod_exists  # uid -> still known (not deleted)
        self.node_of = node_of
        self.timeout = timeout
        self.poll = poll
        # PreBinds waiting, by the claim keys and PV names whose next version wakes them: with
        # thousands of pods waiting on the PV controller, polling each cost more than the rest
        # of a pod's scheduling (py-spy, 15,000 nodes; bench/results/2026-11-27/README.md).
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}
        storage.on_object = self._wake

    # --- the extension points ----------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        try:
            plan = self.assume(pod, node)
        except VolumeError as exc:
            return str(exc)
        if plan:
            state.write(self.name, plan)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        plan = state.read(self.name)
        if plan:
            self.revert(plan)

    def allowance(self, state: CycleState) -> float:
        return self.timeout if state.read(self.name) else 0.0

    async def prebind(
        self, state: CycleState, pod: PodInfo, node: str, waiting: Callable[[], None]
    ) -> str | None:
        plan = state.read(self.name)
        if not plan:
            return None
        try:
            await self.bind_volumes(pod, node, plan, waiting)
        except VolumeBindError as exc:
            return str(exc)
        return None

    # --- Reserve / Unreserve -----------------------------------------------------------------
    def assume(self, pod: PodInfo, node_name: str) -> VolumePlan:
        """AssumePodVolumes for the chosen node; an empty plan when the pod has no claim
        waiting for the scheduler. Raises VolumeError (kube-scheduler's Reserve error)."""
        if not pod.volumes.claims:
            return VolumePlan()
        claims = pod_claims(pod, self.storage)
        node = self.node_of(node_name)
        if not isinstance(claims, PodClaims) or not claims.delayed or node is None:
            return VolumePlan()
        found = find_pod_volumes(pod, claims, node, self.storage)
        if isinstance(found, list):  # the Filter passed this node in the same cycle
            raise VolumeError(f"volumes no longer fit node {node.name}: {'; '.join(found)}")
        bind = []
        for volume, claim in found.bind:
            assumed = volume
            if not volume.bound_to(claim) or BOUND_BY_CONTROLLER not in volume.annotations:
                annotations = dict(volume.annotations)
                if not volume.bound_to(claim):
                    annotations.setdefault(BOUND_BY_CONTROLLER, "yes")
                assumed = dataclasses.replace(
                    volume,
                    claim_ref=ClaimRef(claim.namespace, claim.name, claim.uid),
                    annotations=annotations,
                )
                self.storage.assume_volume(assumed)
            bind.append((assumed, claim))
        provision = []
        for claim in found.provision:
            annotations = {**claim.annotations, SELECTED_NODE: node.name}
            assumed_claim = dataclasses.replace(claim, annotations=annotations)
            self.storage.assume_claim(assumed_claim)
            provision.append(assumed_claim)
        return VolumePlan(tuple(bind), tuple(provision))

    def revert(self, plan: VolumePlan) -> None:
        """RevertAssumedPodVolumes."""
        for volume, _ in plan.bind:
            self.storage.restore_volume(volume.name)
        for claim in plan.provision:
            self.storage.restore_claim(claim.key)

    # --- PreBind -----------------------------------------------------------------------------
    async def bind_volumes(
        self,
        pod: PodInfo,
        node_name: str,
        plan: VolumePlan,
        waiting: Callable[[], None] = lambda: None,
    ) -> None:
        """BindPodVolumes: raises VolumeBindError (after restoring what it did not write).
        `waiting` is called once the writes are made, if the claims are not bound yet."""
        written = Written({}, {})
        try:
            for volume, claim in plan.bind:
                written.volumes[volume.name] = await self._bind_volume(volume, claim)
            for claim in plan.provision:
                written.claims[claim.key] = await self._select_node(claim, node_name)
        finally:
            for volume, _ in plan.bind:  # only what was not written: the rest stays assumed
                if volume.name not in written.volumes:
                    self.storage.restore_volume(volume.name)
            for claim in plan.provision:
                if claim.key not in written.claims:
                    self.storage.restore_claim(claim.key)
        deadline = time.monotonic() + self.timeout
        called = False
        while not self.check(pod, node_name, plan, written):
            if not called:
                waiting()
                called = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise VolumeBindError(
                    "binding volumes: context deadline exceeded (claims not bound within "
                    f"{self.timeout:.0f}s)"
                )
            await self._next_version(plan, min(self.poll, left))

    async def _next_version(self, plan: VolumePlan, timeout: float) -> None:
        """Until a new version of one of the plan's claims or PVs arrives, or `timeout`."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = {key for volume, claim in plan.bind for key in (volume.name, claim.key)}
        keys.update(claim.key for claim in plan.provision)
        for key in keys:
            self._waiting.setdefault(key, set()).add(woken)
        try:
            await asyncio.wait((woken,), timeout=timeout)
        finally:
            for key in keys:
                discard(self._waiting, key, woken)

    def _wake(self, key: str) -> None:
        for woken in self._waiting.pop(key, ()):
            if not woken.done():
                woken.set_result(None)

    async def _write(self, path: str, body: dict[str, Any], what: str) -> int:
        """A conditional merge patch; the resourceVersion the object has now."""
        try:
            status, data = await self.transport.request(
                "PATCH", path, body, content_type=MERGE_PATCH
            )
        except Exception as exc:  # as kube-scheduler, a write's error is not wrapped
            raise VolumeBindError(f"updating {what}: {exc!r}") from exc
        if status >= 300:
            raise VolumeBindError(_message(data))
        try:
            return int(json.loads(data)["metadata"]["resourceVersion"])
        except (ValueError, KeyError, TypeError):  # no version said: newer than the one read
            return _version(str((body.get("metadata") or {}).get("resourceVersion"))) + 1

    async def _bind_volume(self, volume: Volume, claim: Claim) -> int:
        ref = volume.claim_ref or ClaimRef(claim.namespace, claim.name, claim.uid)
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": volume.resource_version,
                "annotations": dict(volume.annotations),
            },
            "spec": {
                "claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": ref.namespace,
                    "name": ref.name,
                    "uid": ref.uid,
                    "resourceVersion": claim.resource_version,
                }
            },
        }
        path = f"/api/v1/persistentvolumes/{volume.name}"
        return await self._write(path, body, f'PersistentVolume "{volume.name}"')

    async def _select_node(self, claim: Claim, node_name: str) -> int:
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": claim.resource_version,
                "annotations": {SELECTED_NODE: node_name},
            }
        }
        path = f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}"
        return await self._write(path, body, f'PersistentVolumeClaim "{claim.key}"')

    def check(self, pod: PodInfo, node_name: str, plan: VolumePlan, written: Written) -> bool:
        """checkBindings, on the informers' view of the API objects: True when every claim is
        fully bound; False to wait; raises VolumeBindError when binding must be retried."""
        if not self.pod_exists(pod.uid):
            raise VolumeBindError("binding volumes: pod does not exist any more")
        node = self.node_of(node_name)
        if node is None:
            raise VolumeBindError(f'binding volumes: failed to get node "{node_name}"')
        api = self.storage
        for volume, claim in plan.bind:
            current = api.volumes.get(volume.name)
            bound_claim = api.claims.get(claim.key)
            if current is None or bound_claim is None:
                raise VolumeBindError(
                    f"binding volumes: failed to check binding of pv {volume.name!r}"
                )
            if _version(current.resource_version) < written.volumes.get(volume.name, 0):
                return False  # our update has not reached the watch yet
            if not current.fits_node(node.labels):
                raise VolumeBindError(
                    f'binding volumes: pv "{volume.name}" node affinity doesn\'t match node '
                    f'"{node_name}"'
                )
            if current.claim_ref is None or not current.claim_ref.uid:
                raise VolumeBindError(f'binding volumes: ClaimRef got reset for pv "{volume.name}"')
            if not bound_claim.fully_bound:
                return False
        for claim in plan.provision:
            current_claim = api.claims.get(claim.key)
            if current_claim is None:
                raise VolumeBindError(
                    f'binding volumes: failed to check provisioning pvc "{claim.key}"'
                )
            if _version(current_claim.resource_version) < written.claims.get(claim.key, 0):
                return False
            if current_claim.selected_node != node_name:
                raise VolumeBindError(
                    f'binding volumes: provisioning failed for PVC "{claim.name}"'
                )
            if current_claim.volume_name:
                provisioned = api.volumes.get(current_claim.volume_name)
                if provisioned is None:
                    return False
                if not provisioned.fits_node(node.labels):
                    raise VolumeBindError(
                        f'binding volumes: pv "{provisioned.name}" node affinity doesn\'t match '
                        f'node "{node_name}"'
                    )
            if not current_claim.fully_bound:
                return False
        return True


def _version(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message") or data[:200])
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
