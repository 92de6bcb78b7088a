from decimal import Decimal
from typing import Any

import pytest

from loadwise.framework.types import parse_pod
from loadwise.resources import parse_quantity, placed_requests, pod_requests, to_amount
from loadwise.scheduler.device_classes import DeviceClasses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Decimal("0.1")),
        ("1", Decimal(1)),
        ("1.5", Decimal("1.5")),
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(2**20)),
        ("2Gi", Decimal(2 * 2**30)),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1e3", Decimal(1000)),
        ("500u", Decimal("0.0005")),
        (3, Decimal(3)),
    ],
)
def test_parse_quantity(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1x", "1e", "--1", "NaN", "Infinity", True])
def test_parse_quantity_rejects_garbage(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)  # type: ignore[arg-type]


def test_cpu_in_millicores_rounds_up() -> None:
    assert to_amount("cpu", "250m") == 250
    assert to_amount("cpu", "0.0005") == 1
    assert to_amount("memory", "1Ki") == 1024


def test_pod_requests_sum_of_containers_and_max_of_init() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
            {"resources": {"requests": {"cpu": "200m"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "1", "memory": "32Mi"}}}],
        "overhead": {"cpu": "10m"},
    }
    requests = pod_requests(spec)
    assert requests.get("cpu") == 1000 + 10  # init peak beats the app sum; overhead on top
    assert requests.get("memory") == 64 * 2**20


def test_sidecars_add_to_app_containers() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "100m"}}}],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            {"resources": {"requests": {"cpu": "120m"}}},
        ],
    }
    # app 100 + sidecar 50 = 150; the later init container runs beside the sidecar: 170.
    assert pod_requests(spec).get("cpu") == 170


def test_limits_default_requests() -> None:
    spec = {"containers": [{"resources": {"limits": {"cpu": "300m", "nvidia.com/gpu": "1"}}}]}
    requests = pod_requests(spec)
    assert requests.get("cpu") == 300
    assert requests.get("nvidia.com/gpu") == 1


# --- pod-level resources (KEP-2837), as component-helpers' PodRequests and the scheduler --------
MI = 2**20


def test_pod_level_requests_replace_the_containers_sum() -> None:
    spec = {
        "resources": {"requests": {"cpu": "1500m"}},
        "containers": [{"name": "a"}, {"name": "b"}],  # no container requests at all
    }
    requests = pod_requests(spec)
    assert requests.amounts == {"cpu": 1500}  # what NodeResourcesFit checks
    # Scoring: every container missing a request takes the defaults, then the pod level wins.
    assert requests.nonzero == (1500, 2 * 200 * MI)
    # The scheduler's cache: memory is missing from the pod's requests: the defaults per container.
    assert requests.placed_nonzero == (1500, 2 * 200 * MI)


def test_scoring_and_the_cache_default_differently_with_pod_level_requests() -> None:
    spec = {
        "resources": {"requests": {"memory": "1Gi"}},
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "200m"}}},
            {"name": "b"},
        ],
    }
    requests = pod_requests(spec)
    assert requests.amounts == {"cpu": 200, "memory": 1024 * MI}
    assert requests.nonzero == (300, 1024 * MI)  # b's missing cpu request counts 100m
    assert requests.placed_nonzero == (200, 1024 * MI)  # cpu is in the requests: no default


def test_pod_level_requests_then_overhead_and_only_supported_resources() -> None:
    spec = {
        "resources": {
            "requests": {"cpu": "1", "hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi"},
        },
        "containers": [
            {"resources": {"requests": {"cpu": "3", "memory": "64Mi", "example.com/dev": "1"}}}
        ],
        "overhead": {"cpu": "100m"},
    }
    requests = pod_requests(spec)
    # cpu from the pod level plus overhead; memory and the extended resource from containers;
    # ephemeral-storage is not a pod-level resource, so the containers' (none) stands.
    assert requests.amounts == {
        "cpu": 1100,
        "memory": 64 * MI,
        "example.com/dev": 1,
        "hugepages-2Mi": 4 * MI,
    }


def test_pods_without_pod_level_requests_are_unchanged() -> None:
    spec = {"resources": {"limits": {"cpu": "2"}}, "containers": [{"name": "a"}]}
    requests = pod_requests(spec)
    assert requests.amounts == {}
    assert requests.nonzero == requests.placed_nonzero == (100, 200 * MI)


# --- in-place resize (KEP-1287): placed pods count max(spec, allocated, actual) ---------------
def _resizing(allocated: str, actual: str, infeasible: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {
        "containerStatuses": [
            {
                "name": "app",
                "allocatedResources": {"cpu": allocated},
                "resources": {"requests": {"cpu": actual}},
            }
        ]
    }
    if infeasible:
        status["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
    return status


SPEC = {
    "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
}


def test_a_resize_in_flight_counts_the_larger_of_spec_and_status() -> None:
    grown = placed_requests(SPEC, _resizing("1500m", "500m"))  # allocated, not yet actuated
    assert grown.amounts == {"cpu": 1500, "memory": 1024 * MI}
    small = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "200m"}}}]}
    assert placed_requests(small, _resizing("500m", "500m")).get("cpu") == 500  # not freed yet
    assert placed_requests(SPEC, _resizing("500m", "500m")).amounts == pod_requests(SPEC).amounts


def test_an_infeasible_resize_counts_what_is_allocated_and_actual() -> None:
    spec = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "4"}}}]}
    assert placed_requests(spec, _resizing("500m", "500m", infeasible=True)).get("cpu") == 500


def test_resize_takes_the_larger_aggregate_not_each_containers_larger() -> None:
    """Kubernetes 1.37: max(spec sum, actuated sum, allocated sum), not a sum of maxima."""
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1"}}},
        ]
    }
    status = {
        "containerStatuses": [
            {
                "name": "a",
                "allocatedResources": {"cpu": "1500m"},
                "resources": {"requests": {"cpu": "1500m"}},
            },
            {
                "name": "b",
                "allocatedResources": {"cpu": "200m"},
                "resources": {"requests": {"cpu": "200m"}},
            },
        ]
    }
    assert placed_requests(spec, status).get("cpu") == 2000  # spec 2000 > status 1700


def test_the_pod_level_status_sums_win_when_the_kubelet_writes_them() -> None:
    status = {
        "allocatedResources": {"cpu": "3"},
        "resources": {"requests": {"cpu": "2"}},
        "containerStatuses": [{"name": "app", "allocatedResources": {"cpu": "100m"}}],
    }
    assert placed_requests(SPEC, status).get("cpu") == 3000
    pod_level = {**SPEC, "resources": {"requests": {"cpu": "1"}}}
    assert placed_requests(pod_level, status).get("cpu") == 3000  # max(1, 2, 3) at the pod level


def test_parse_pod_counts_a_placed_pods_resize_and_keys_it() -> None:
    raw = {
        "metadata": {"uid": "u", "name": "p", "namespace": "d"},
        "spec": {**SPEC, "nodeName": "n1"},
        "status": _resizing("1500m", "500m"),
    }
    pod = parse_pod(raw, placed=True)
    assert pod.requests.get("cpu") == 1500 and pod.resize_key
    assert parse_pod({**raw, "status": {}}, placed=True).requests.get("cpu") == 500


def test_device_classes_name_the_extended_resources_they_back() -> None:
    backed: dict[str, str] = {}
    classes = DeviceClasses(backed)
    classes.on_event("ADDED", {"metadata": {"name": "gpus"}, "spec": {}})
    assert backed == {"deviceclass.resource.kubernetes.io/gpus": "gpus"}  # the implicit name
    classes.on_event(
        "MODIFIED",
        {
            "metadata": {"name": "gpus", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"extendedResourceName": "example.com/gpu"},
        },
    )
    assert backed["example.com/gpu"] == "gpus"
    # a newer class naming the same resource backs it; the older keeps its implicit name
    classes.on_event(
        "ADDED",
        {
            "metadata": {"name": "a-gpus", "creationTimestamp": "2026-02-01T00:00:00Z"},
            "spec": {"extendedResourceName": "example.com/gpu"},
        },
    )
    assert backed["example.com/gpu"] == "a-gpus"
    assert backed["deviceclass.resource.kubernetes.io/gpus"] == "gpus"
    classes.on_event("DELETED", {"metadata": {"name": "a-gpus"}})
    assert backed["example.com/gpu"] == "gpus"
    classes.relisted(set())
    assert backed == {}
