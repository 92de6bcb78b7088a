"""ResourceClaims a pod names (dynamic resource allocation, `resource.k8s.io/v1`), and whether
they are there to be allocated: kube-scheduler's DynamicResources PreEnqueue
(`foreachPodResourceClaim` with `resourceclaim.Name` and `IsForPod`, v1.37.2), with its wording.

A pod's claim is named directly (`resourceClaimName`) or made from a template by
kube-controller-manager's resourceclaim controller, which writes the name it chose into the
pod's `status.resourceClaimStatuses`; until then the pod waits. A claim made from a template
must be controlled by the pod (a claim of the same name made for another pod is not its own).
PodGroup-level claims (DRAWorkloadResourceClaims) are off by default in v1.37 and not accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
CLAIM_NOT_CREATED = "ResourceClaim not created yet"  # resourceclaim.ErrClaimNotFound
API_UNSUPPORTED = "none of the supported fields are set"  # resourceclaim.ErrAPIUnsupported


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of the pod's `spec.resourceClaims`, resolved to a ResourceClaim's name."""

    name: str  # the entry's name in the pod
    claim: str  # the ResourceClaim's name ("" when none is needed: the controller made none)
    from_template: bool  # then the claim must be controlled by the pod


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The pod's claims, or why they cannot be named yet (kube-scheduler's error)."""

    claims: tuple[PodClaim, ...] = ()
    error: str = ""

    def __bool__(self) -> bool:
        return bool(self.claims or self.error)


NO_CLAIMS = PodClaims()


@dataclass(frozen=True, slots=True)
class Claim:
    """What the scheduler reads of a ResourceClaim."""

    namespace: str
    name: str
    uid: str
    deleting: bool
    controller_uid: str  # the uid of its controlling owner ("" if none)
    resource_version: str = ""
    reserved_for: tuple[str, ...] = ()  # uids of the consumers in status.reservedFor
    # made by a scheduler for a pod's extended resources backed by a DeviceClass: the
    # annotation resource.kubernetes.io/extended-resource-claim "true"; its controller's name
    extended: bool = False
    controller_name: str = ""
    # status.allocation as written (None: not allocated) and the whole object as the informer
    # gave it (the device allocator's input, PreBind's starting point)
    allocation: Mapping[str, Any] | None = field(default=None, compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_pod_claims(
    namespace: str, name: str, spec: Mapping[str, Any], status: Mapping[str, Any]
) -> PodClaims:
    """The pod's `spec.resourceClaims`, each resolved as `resourceclaim.Name` resolves it."""
    entries = spec.get("resourceClaims") or ()
    if not entries:
        return NO_CLAIMS
    made = {
        str(s.get("name") or ""): str(s.get("resourceClaimName") or "")
        for s in status.get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    claims: list[PodClaim] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        entry_name = str(entry.get("name") or "")
        if entry.get("resourceClaimName"):
            claims.append(PodClaim(entry_name, str(entry["resourceClaimName"]), False))
        elif entry.get("resourceClaimTemplateName"):
            if entry_name not in made:
                return PodClaims(error=f'pod "{namespace}/{name}": {CLAIM_NOT_CREATED}')
            claims.append(PodClaim(entry_name, made[entry_name], True))
        else:
            return PodClaims(
                error=f'pod "{namespace}/{name}", spec.resourceClaim "{entry_name}": '
                f"{API_UNSUPPORTED}"
            )
    return PodClaims(tuple(claims))


def parse_claim(raw: Mapping[str, Any]) -> Claim:
    meta = raw.get("metadata") or {}
    controller = next(
        (
            ref
            for ref in meta.get("ownerReferences") or ()
            if isinstance(ref, Mapping) and ref.get("controller") is True
        ),
        None,
    )
    status = raw.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    reserved = status.get("reservedFor") if isinstance(status, Mapping) else None
    return Claim(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        controller_uid=str(controller.get("uid") or "") if controller is not None else "",
        controller_name=str(controller.get("name") or "") if controller is not None else "",
        extended=(meta.get("annotations") or {}).get(EXTENDED_ANNOTATION) == "true",
        resource_version=str(meta.get("resourceVersion") or ""),
        reserved_for=tuple(
            str(r.get("uid") or "") for r in reserved or () if isinstance(r, Mapping)
        ),
        allocation=allocation if isinstance(allocation, Mapping) else None,
        raw=raw,
    )


def missing_claim(
    pod_uid: str,
    namespace: str,
    name: str,
    claims: PodClaims,
    known: Mapping[str, Claim],
) -> str | None:
    """Why the pod cannot be queued yet (kube-scheduler's PreEnqueue reason), or None: every
    claim it names exists, is not being deleted, and, if made from a template, is the pod's."""
    if claims.error:
        return claims.error
    for ref in claims.claims:
        if not ref.claim:
            continue  # the controller made no claim for it on purpose
        key = f"{namespace}/{ref.claim}"
        claim = known.get(key)
        if claim is None:
            return f'could not find ResourceClaim "{key}"'
        if claim.deleting:
            return f'resourceclaim "{ref.claim}" is being deleted'
        if ref.from_template and claim.controller_uid != pod_uid:
            return (
                f"ResourceClaim {key} was not created for Pod {namespace}/{name} (Pod is not owner)"
            )
    return None
