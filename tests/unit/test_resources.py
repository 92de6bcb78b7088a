from decimal import Decimal

import pytest

from loadwise.resources import parse_quantity, pod_requests, to_amount


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
