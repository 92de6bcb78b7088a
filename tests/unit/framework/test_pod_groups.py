"""Pod groups of both APIs read into one shape; a malformed one is refused naming the field."""

from __future__ import annotations

import pytest

from loadwise.framework.pod_groups import (
    COSCHEDULING,
    COSCHEDULING_LABEL,
    UPSTREAM,
    PodGroupKey,
    parse_pod_group,
    pod_group_of,
)
from loadwise.framework.types import parse_pod
from loadwise_dev import manifests


def group(api: str, spec: dict) -> dict:
    return {"metadata": {"namespace": "ns", "name": "g"}, "spec": spec}


def test_a_pod_names_its_group_by_field_or_label_in_its_namespace() -> None:
    pod = manifests.pod("p")
    pod["metadata"]["namespace"] = "ns"
    assert parse_pod(pod).group is None
    pod["metadata"]["labels"] = {COSCHEDULING_LABEL: "spark-1"}
    assert parse_pod(pod).group == PodGroupKey(COSCHEDULING, "ns", "spark-1")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    assert parse_pod(pod).group == PodGroupKey(UPSTREAM, "ns", "train")
    assert parse_pod(pod, placed=True).group == PodGroupKey(UPSTREAM, "ns", "train")
    pod["spec"]["schedulingGroup"] = {"podGroupName": 7}  # malformed: no group, no crash
    assert pod_group_of(pod["metadata"], pod["spec"]) == PodGroupKey(COSCHEDULING, "ns", "spark-1")


def test_both_apis_read_into_one_shape() -> None:
    gang = parse_pod_group(
        UPSTREAM,
        group(UPSTREAM, {"schedulingPolicy": {"gang": {"minCount": 4}},
                         "disruptionMode": {"all": {}}, "priority": 7}),
    )  # fmt: skip
    assert (gang.minimum, gang.gang, gang.disrupt_all, gang.priority) == (4, True, True, 7)
    basic = parse_pod_group(UPSTREAM, group(UPSTREAM, {"schedulingPolicy": {"basic": {}}}))
    assert (basic.minimum, basic.gang, basic.disrupt_all) == (1, False, False)
    cosched = parse_pod_group(
        COSCHEDULING,
        group(COSCHEDULING, {"minMember": 3, "scheduleTimeoutSeconds": 30,
                             "minResources": {"cpu": "2", "memory": "1Gi"}}),
    )  # fmt: skip
    assert (cosched.minimum, cosched.timeout) == (3, 30.0)
    assert cosched.min_resources == {"cpu": 2000, "memory": 2**30}
    assert str(cosched.key) == "ns/g"


@pytest.mark.parametrize(
    ("api", "spec", "field"),
    [
        (UPSTREAM, {}, "spec.schedulingPolicy"),
        (
            UPSTREAM,
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            "spec.schedulingPolicy.gang.minCount",
        ),
        (UPSTREAM, {"schedulingPolicy": {"basic": {}}, "priority": "high"}, "spec.priority"),
        (COSCHEDULING, {"minMember": "3"}, "spec.minMember"),
        (
            COSCHEDULING,
            {"minMember": 2, "scheduleTimeoutSeconds": -1},
            "spec.scheduleTimeoutSeconds",
        ),
        (COSCHEDULING, {"minMember": 2, "minResources": {"cpu": "lots"}}, "spec.minResources"),
    ],
)
def test_a_malformed_group_is_refused_naming_the_field(api: str, spec: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", "\\.")):
        parse_pod_group(api, group(api, spec))  # type: ignore[arg-type]
