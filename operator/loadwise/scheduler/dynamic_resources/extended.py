"""Extended resources backed by a DeviceClass (KEP-5004, on in v1.37.2): a pod asking
`example.com/gpu: 1` in a container, on a node whose allocatable does not list it, gets devices
of the class through a ResourceClaim the scheduler creates for it, as kube-scheduler's
DynamicResources does (extendeddynamicresources.go):

- PreFilter: a claim made for the pod in an earlier attempt (annotated
  `resource.kubernetes.io/extended-resource-claim: "true"`, controlled by the pod) is stale:
  Filter refuses every node ("cannot schedule extended resource claim") and PostFilter deletes
  it, so the next attempt starts afresh. Otherwise the claim exists only in memory.
- Filter: per node, the resources it must provide through devices (those its allocatable lacks)
  become the claim's requests (framework/extended_resources.py); the allocator judges that claim
  with the pod's own.
- PreBind (claim_binding.py): the claim is created (`generateName: <pod>-extended-resources-`),
  then allocated and reserved like any claim, and the pod's
  `status.extendedResourceClaimStatus` says which request serves which container.
- Unreserve: a claim created for the attempt is deleted.

Where a node's device plugin provides some of the resources and the pod has claims of its own,
kube-scheduler allocates an empty claim and then fails PreBind ("extended resource claim not
found for node"); loadwise allocates the pod's own claims there and creates none.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from ...framework.extended_resources import may_be_dra_backed, requests_and_mappings
from ...framework.resource_claims import EXTENDED_ANNOTATION, Claim, parse_claim
from ...framework.types import NodeInfo, PodInfo
from ...kube.transport import Http

log = logging.getLogger(__name__)

IN_MEMORY = "<extended-resources>"  # never a valid name: the claim is not written yet
STALE = "cannot schedule extended resource claim"
NOT_FIT = "cannot fit resource"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims"


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The claim for the resources one group of nodes must provide through devices."""

    claim: Claim  # in memory: name IN_MEMORY, a uid of its own for the in-flight allocation
    mappings: tuple[Mapping[str, str], ...]  # the pod's requestMappings


def backed_requests(pod: PodInfo, backed: Mapping[str, str]) -> tuple[str, ...]:
    """The pod's requested extended resources a DeviceClass backs."""
    if not backed or not pod.container_requests:
        return ()
    return tuple(sorted(n for n, q in pod.requests.amounts.items() if q and n in backed))


def needed_on(pod: PodInfo, node: NodeInfo, backed: Mapping[str, str]) -> frozenset[str] | str:
    """filterExtendedResources: the backed resources the node must provide as devices, or
    why it cannot take the pod at all (a resource neither listed nor backed)."""
    allocatable = node.allocatable
    needed = []
    for name, amount in pod.requests.amounts.items():
        if not amount or not may_be_dra_backed(name):
            continue
        if name in backed and not allocatable.get(name):
            needed.append(name)
        elif name not in allocatable:
            return NOT_FIT
    return frozenset(needed)


def in_memory(pod: PodInfo, needed: frozenset[str], backed: Mapping[str, str]) -> ExtendedClaim:
    requests, mappings = requests_and_mappings(pod.container_requests, sorted(needed), backed)
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": pod.namespace,
            "name": IN_MEMORY,
            "uid": str(uuid.uuid4()),
            "generateName": f"{pod.name}-extended-resources-",
            "ownerReferences": [_owner(pod)],
            "annotations": {EXTENDED_ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": requests}},
    }
    return ExtendedClaim(parse_claim(raw), tuple(mappings))


def _owner(pod: PodInfo) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}


async def create(transport: Http, extended: ExtendedClaim) -> Claim:
    """The claim written (PreBind), as the API server answered."""
    raw = orjson.loads(orjson.dumps(extended.claim.raw))
    meta = raw["metadata"]
    del meta["name"], meta["uid"]
    code, data = await transport.request("POST", CLAIMS.format(meta["namespace"]), raw)
    if code >= 300:
        raise RuntimeError(f"create claim for extended resources: {_message(data)}")
    return parse_claim(orjson.loads(data))


async def record_in_pod(
    transport: Http, pod: PodInfo, claim: Claim, extended: ExtendedClaim
) -> str | None:
    """The pod's `status.extendedResourceClaimStatus` (a merge patch of its status)."""
    status = {
        "extendedResourceClaimStatus": {
            "requestMappings": [dict(m) for m in extended.mappings],
            "resourceClaimName": claim.name,
        }
    }
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
    try:
        code, data = await transport.request(
            "PATCH", path, {"status": status}, content_type="application/merge-patch+json"
        )
    except Exception as exc:
        return f"update pod {pod.key} ExtendedResourceClaimStatus: {exc!r}"
    if code >= 300:
        return f"update pod {pod.key} ExtendedResourceClaimStatus: {_message(data)}"
    return None


async def delete(transport: Http, claim: Claim) -> None:
    """deleteClaim: its finalizer removed (retried on conflict from a fresh read), then the
    claim deleted. Gone already is fine."""
    path = f"{CLAIMS.format(claim.namespace)}/{claim.name}"
    try:
        for _ in range(5):
            code, data = await transport.request("GET", path)
            if code == 404:
                return
            raw = orjson.loads(data)
            finalizers = list((raw.get("metadata") or {}).get("finalizers") or ())
            if not finalizers:
                break
            raw["metadata"]["finalizers"] = [
                f for f in finalizers if f != "resource.kubernetes.io/delete-protection"
            ]
            code, data = await transport.request("PUT", path, raw)
            if code != 409:
                break
        code, data = await transport.request("DELETE", path)
        if code >= 300 and code != 404:
            log.warning("deleting %s: HTTP %d %s", claim.key, code, _message(data))
    except Exception as exc:
        log.error("deleting %s: %r", claim.key, exc)


def _message(data: bytes) -> str:
    try:
        return str(orjson.loads(data).get("message") or data[:300])
    except (orjson.JSONDecodeError, AttributeError):
        return data[:300].decode(errors="replace")
