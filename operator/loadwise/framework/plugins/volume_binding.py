"""VolumeBinding: the pod's claims must be bound, or bindable on the node (a matching
PersistentVolume, or provisioning there); see ../pod_volumes.py. Its PreFilter refuses a pod
whose claims are missing, lost, being deleted or unbound with immediate binding; its Filter's
refusals are all UnschedulableAndUnresolvable, as kube-scheduler's."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import UNSIGNABLE, FilterPlugin, Inputs, Signature
from ..pod_volumes import PodClaims, VolumeError, find_pod_volumes, pod_claims
from ..types import NodeInfo


def claims_of(ctx: CycleContext) -> PodClaims | str | None:
    return pod_claims(ctx.pod, ctx.state.storage)


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
