"""kube-scheduler's VolumeBinding, the pure part: which of a pod's claims are bound, which wait
for the scheduler to pick a PersistentVolume or a node to provision on, and, per node, whether
they can be satisfied there and how (pkg/scheduler/framework/plugins/volumebinding/binder.go
and component-helpers' FindMatchingVolume in the pinned release). The API writes of PreBind are
the scheduler's (scheduler/volumes/binder.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...storage import NO_PROVISIONER, Claim, StorageClass, Volume
from ...types import NodeInfo, PodInfo
from ...view import StorageView
from .csi_migration import TranslationError, as_seen_on

# Filter's reasons (binder.go's ConflictReasons), in the order it reports them.
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@dataclass(frozen=True, slots=True)
class PodClaims:
    """PreFilter's result (GetPodVolumeClaims): the claims to check on each node (the PVs
    the delayed ones may take are looked up per node: StorageView.candidate_volumes)."""

    bound: tuple[Claim, ...]
    delayed: tuple[Claim, ...]  # unbound, of a WaitForFirstConsumer class


@dataclass(frozen=True, slots=True)
class VolumePlan:
    """What PreBind must do on the chosen node (PodVolumes): PVs to bind to claims, and claims
    to provision there."""

    bind: tuple[tuple[Volume, Claim], ...] = ()
    provision: tuple[Claim, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.bind or self.provision)


class VolumeError(Exception):
    """kube-scheduler returns an error status (not a verdict) here: the pod is retried."""


def pod_claims(pod: PodInfo, storage: StorageView) -> PodClaims | str | None:
    """PreFilter: None when the pod references no claim; a refusal message when a claim is
    missing, lost, being deleted, not the pod's (ephemeral), or unbound with immediate binding
    (all UnschedulableAndUnresolvable); else the claims to check per node."""
    if not pod.volumes.claims:
        return None
    claims: list[Claim] = []
    for _, name, ephemeral in pod.volumes.claims:  # podHasPVCs
        claim = storage.claim(pod.namespace, name)
        if claim is None:
            if ephemeral:
                return (
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim "
                    f'"{name}"'
                )
            return f'persistentvolumeclaim "{name}" not found'
        if claim.phase == "Lost":
            return (
                f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                f'"{claim.volume_name}"'
            )
        if claim.deleting:
            return f'persistentvolumeclaim "{name}" is being deleted'
        if ephemeral and claim.controller_uid != pod.uid:
            return (
                f"PVC {claim.namespace}/{claim.name} was not created for pod "
                f"{pod.namespace}/{pod.name} (pod is not owner)"
            )
        claims.append(claim)
    bound, delayed, immediate = [], [], []
    for claim in claims:  # GetPodVolumeClaims
        if claim.fully_bound:
            bound.append(claim)
        elif _delays_binding(claim, storage) and not claim.volume_name:
            delayed.append(claim)
        else:  # immediate binding (or pre-bound by its author): the PV controller binds it
            immediate.append(claim)
    if immediate:
        return UNBOUND_IMMEDIATE
    return PodClaims(tuple(bound), tuple(delayed))


def _delays_binding(claim: Claim, storage: StorageView) -> bool:
    """IsDelayBindingMode: a class that is unknown, or has no mode, binds immediately (an
    unset mode is an error there, which a class from the API server never has)."""
    if not claim.class_name:
        return False
    cls = storage.storage_class(claim.class_name)
    return cls is not None and cls.delays_binding


def find_pod_volumes(
    pod: PodInfo, claims: PodClaims, node: NodeInfo, storage: StorageView
) -> VolumePlan | list[str]:
    """Filter (FindPodVolumes): the plan for this node, or the reasons it cannot take them.
    Raises VolumeError where kube-scheduler fails the cycle with an error."""
    bound_ok, bound_found = True, True
    migrated = storage.migrated_plugins(node.name) if claims.bound else frozenset()
    for claim in claims.bound:  # checkBoundClaims
        volume = storage.volume(claim.volume_name)
        if volume is None:
            bound_found = False
            break
        try:
            volume = as_seen_on(volume, migrated)
        except TranslationError as exc:
            raise VolumeError(str(exc)) from exc
        if not volume.fits_node(node.labels):
            bound_ok = False
            break
    unbound_ok, enough_space = True, True
    bind: list[tuple[Volume, Claim]] = []
    provision: list[Claim] = []
    if claims.delayed:
        to_match: list[Claim] = []
        to_provision: list[Claim] = []
        for claim in claims.delayed:
            selected = claim.selected_node
            if selected is not None:
                if selected != node.name:  # a provisioner works for another node
                    unbound_ok = False
                    return _reasons(bound_ok, bound_found, unbound_ok, enough_space)
                to_provision.append(claim)
            else:
                to_match.append(claim)
        if to_match:
            unbound_ok, bind, unmatched = _match_volumes(to_match, storage, node)
            to_provision.extend(unmatched)
        if to_provision:
            unbound_ok, enough_space, provision = _check_provisions(to_provision, node, storage)
    if not (bound_ok and bound_found and unbound_ok and enough_space):
        return _reasons(bound_ok, bound_found, unbound_ok, enough_space)
    return VolumePlan(tuple(bind), tuple(provision))


def _reasons(bound_ok: bool, bound_found: bool, unbound_ok: bool, space: bool) -> list[str]:
    reasons = []
    if not bound_ok:
        reasons.append(NODE_CONFLICT)
    if not unbound_ok:
        reasons.append(BIND_CONFLICT)
    if not space:
        reasons.append(NOT_ENOUGH_SPACE)
    if not bound_found:
        reasons.append(PV_NOT_EXIST)
    return reasons


def _match_volumes(
    claims: Sequence[Claim], storage: StorageView, node: NodeInfo
) -> tuple[bool, list[tuple[Volume, Claim]], list[Claim]]:
    """findMatchingVolumes: claims by increasing request, each taking the smallest fitting PV
    not chosen already (a PV pre-bound to the claim first)."""
    chosen: set[str] = set()
    found = True
    bind: list[tuple[Volume, Claim]] = []
    unmatched: list[Claim] = []
    for claim in sorted(claims, key=lambda c: c.request):  # a stable sort, as Go's sort.Sort
        volume = find_matching_volume(claim, storage.candidate_volumes(claim, node), node, chosen)
        if volume is None:
            unmatched.append(claim)
            found = False
            continue
        chosen.add(volume.name)
        bind.append((volume, claim))
    return found, bind, unmatched


def find_matching_volume(
    claim: Claim, volumes: Sequence[Volume], node: NodeInfo, excluded: set[str]
) -> Volume | None:
    """component-helpers' FindMatchingVolume on the scheduler's path (a node, delayed
    binding), with VolumeAttributesClass on (its default since 1.34)."""
    smallest: Volume | None = None
    for volume in volumes:
        if volume.name in excluded:
            continue
        if volume.claim_ref is not None and not volume.bound_to(claim):
            continue
        if volume.capacity < claim.request:
            continue
        if volume.volume_mode != claim.volume_mode:
            continue
        if volume.volume_attributes_class != claim.volume_attributes_class:
            continue
        if volume.deleting:
            continue
        fits = volume.fits_node(node.labels)
        if volume.bound_to(claim):  # pre-bound by its author: this PV or none
            return volume if fits else None
        if volume.phase != "Available":
            continue
        if claim.selector is not None and not claim.selector.matches(volume.labels):
            continue
        if volume.class_name != claim.class_name or not fits:
            continue
        if not claim.access_modes <= volume.access_modes:
            continue
        if smallest is None or smallest.capacity > volume.capacity:
            smallest = volume
    return smallest


def _check_provisions(
    claims: Sequence[Claim], node: NodeInfo, storage: StorageView
) -> tuple[bool, bool, list[Claim]]:
    """checkVolumeProvisions: (provisioning possible, enough storage, claims to provision)."""
    out: list[Claim] = []
    for claim in claims:
        if not claim.class_name:
            raise VolumeError(f'no class for claim "{claim.key}"')
        cls = storage.storage_class(claim.class_name)
        if cls is None:
            raise VolumeError(f'failed to find storage class "{claim.class_name}"')
        if not cls.provisioner or cls.provisioner == NO_PROVISIONER:
            return False, True, []
        if not cls.topology_allows(node.labels):
            return False, True, []
        if not _enough_capacity(claim, cls, node, storage):
            return True, False, []
        out.append(claim)
    return True, True, out


def _enough_capacity(claim: Claim, cls: StorageClass, node: NodeInfo, storage: StorageView) -> bool:
    """hasEnoughCapacity: checked only for CSI drivers that publish capacity."""
    if not claim.has_request or not storage.driver_publishes_capacity(cls.provisioner):
        return True
    return any(
        capacity.class_name == cls.name
        and capacity.limit is not None
        and capacity.limit >= claim.request
        and capacity.reaches(node.labels)
        for capacity in storage.capacities()
    )
