"""VolumeBinding: the pod's claims must be bound, or bindable on the node (a matching
PersistentVolume, or provisioning there); see pod_volumes.py. Its PreFilter refuses a pod
whose claims are missing, lost, being deleted or unbound with immediate binding; its Filter's
refusals are all UnschedulableAndUnresolvable, as kube-scheduler's."""

from __future__ import annotations

from ...context import CycleContext
from ...plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ...storage import NO_PROVISIONER, StorageClass
from ...types import NodeInfo
from .pod_volumes import PodClaims, VolumeError, find_pod_volumes, pod_claims


def claims_of(ctx: CycleContext) -> PodClaims | str | None:
    return pod_claims(ctx.pod, ctx.state.storage)


def can_provision(cls: StorageClass) -> bool:
    return bool(cls.provisioner) and cls.provisioner != NO_PROVISIONER


def narrowed(found: frozenset[str] | None, hosts: frozenset[str]) -> frozenset[str]:
    return hosts if found is None else found & hosts


class VolumeBinding(FilterPlugin):
    name = "VolumeBinding"
    always_unresolvable = True
    inputs = Inputs(pod=("volumes",), node=("labels",))
    node_local = False  # reads claims, volumes, classes and capacities

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if ctx.pod.volumes.claims else ()

    def prefilter(self, ctx: CycleContext) -> str | None:
        if not ctx.pod.volumes.claims:
            return None
        found = ctx.prefiltered(claims_of)
        return found if isinstance(found, str) else None

    def only_hostnames(self, ctx: CycleContext) -> frozenset[str] | None:
        """The hosts of the PVs the claims can have, where every one is a local PV (pinned to
        one hostname): a bound claim's PV, and for an unbound one of a class that cannot
        provision, the PVs `candidate_volumes` could offer. Claims that could land anywhere
        (provisioning, a selected node, a PV without one hostname, a migrated in-tree
        volume) do not narrow."""
        claims = ctx.prefiltered(claims_of)
        if not isinstance(claims, PodClaims):
            return None
        storage = ctx.state.storage
        found: frozenset[str] | None = None
        for claim in claims.bound:
            volume = storage.volume(claim.volume_name)
            if volume is None or volume.in_tree is not None or volume.host is None:
                continue
            found = narrowed(found, frozenset((volume.host,)))
        for claim in claims.delayed:
            cls = storage.storage_class(claim.class_name)
            if claim.selected_node is not None or cls is None or can_provision(cls):
                continue
            hosts = storage.candidate_hosts(claim)
            if hosts is not None:
                found = narrowed(found, hosts)
        return found

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        if not ctx.pod.volumes.claims:
            return None
        claims = ctx.prefiltered(claims_of)
        if claims is None:
            return None
        if isinstance(claims, str):
            return [claims]
        try:
            found = find_pod_volumes(ctx.pod, claims, node, ctx.state.storage)
        except VolumeError as exc:  # kube-scheduler's error status: this node is not taken
            return [str(exc)]
        return found if isinstance(found, list) else None
