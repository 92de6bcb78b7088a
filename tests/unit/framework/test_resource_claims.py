"""A pod's ResourceClaims resolved and checked as kube-scheduler's DynamicResources PreEnqueue
does (resourceclaim.Name, foreachPodResourceClaim, IsForPod), with its wording."""

from __future__ import annotations

from typing import Any

from loadwise.framework.resource_claims import (
    Claim,
    PodClaim,
    missing_claim,
    parse_claim,
    parse_pod_claims,
)


def spec(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"resourceClaims": list(entries)}


def statuses(**names: str | None) -> dict[str, Any]:
    return {
        "resourceClaimStatuses": [
            {"name": k, **({"resourceClaimName": v} if v is not None else {})}
            for k, v in names.items()
        ]
    }


def test_claims_by_name_and_from_templates_once_the_controller_named_them() -> None:
    found = parse_pod_claims(
        "ns",
        "web",
        spec(
            {"name": "gpu", "resourceClaimName": "shared-gpu"},
            {"name": "nic", "resourceClaimTemplateName": "nic-template"},
            {"name": "skipped", "resourceClaimTemplateName": "t"},
        ),
        statuses(nic="web-nic-x7k2p", skipped=None),
    )
    assert not found.error
    assert found.claims == (
        PodClaim("gpu", "shared-gpu", False),
        PodClaim("nic", "web-nic-x7k2p", True),
        PodClaim("skipped", "", True),  # the controller made none on purpose: not waited for
    )


def test_a_template_claim_not_made_yet_and_an_entry_of_neither_kind_say_so() -> None:
    waiting = parse_pod_claims(
        "ns", "web", spec({"name": "gpu", "resourceClaimTemplateName": "t"}), {}
    )
    assert waiting.error == 'pod "ns/web": ResourceClaim not created yet'
    odd = parse_pod_claims("ns", "web", spec({"name": "gpu"}), {})
    assert odd.error == (
        'pod "ns/web", spec.resourceClaim "gpu": none of the supported fields are set'
    )
    assert not parse_pod_claims("ns", "web", {}, {})


def claim(name: str, owner: str = "", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": owner, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta}


def known(*raws: dict[str, Any]) -> dict[str, Claim]:
    return {c.key: c for c in map(parse_claim, raws)}


def test_each_claim_must_exist_not_be_deleted_and_be_the_pods_own_if_made_for_it() -> None:
    claims = parse_pod_claims(
        "ns",
        "web",
        spec(
            {"name": "gpu", "resourceClaimName": "shared-gpu"},
            {"name": "nic", "resourceClaimTemplateName": "t"},
        ),
        statuses(nic="web-nic"),
    )

    def why(*raws: dict[str, Any]) -> str | None:
        return missing_claim("pod-uid", "ns", "web", claims, known(*raws))

    assert why() == 'could not find ResourceClaim "ns/shared-gpu"'
    assert why(claim("shared-gpu")) == 'could not find ResourceClaim "ns/web-nic"'
    assert why(claim("shared-gpu", deleting=True), claim("web-nic", "pod-uid")) == (
        'resourceclaim "shared-gpu" is being deleted'
    )
    assert why(claim("shared-gpu"), claim("web-nic", owner="another-pod")) == (
        "ResourceClaim ns/web-nic was not created for Pod ns/web (Pod is not owner)"
    )
    # a claim named directly need not be the pod's own (claims shared by several pods)
    assert why(claim("shared-gpu", owner="someone"), claim("web-nic", "pod-uid")) is None
