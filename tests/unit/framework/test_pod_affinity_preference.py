"""Preferred inter-pod affinity scored as kube-scheduler's InterPodAffinity Score and
NormalizeScore do: both ways (the pod's preferred terms, placed pods' required and preferred
terms), per topology value, min-max scaled; worked out by hand below."""

from __future__ import annotations

from typing import Any

from loadwise.framework.context import CycleContext
from loadwise.framework.plugins import PodAffinityPreference
from loadwise.framework.plugins.inter_pod_affinity import affinity_preference
from loadwise.framework.types import PodInfo, parse_pod
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

HOST = "kubernetes.io/hostname"


def term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def weighted(weight: int, app: str, key: str) -> list[dict[str, Any]]:
    return [{"weight": weight, "podAffinityTerm": term(app, key)}]


def with_affinity(name: str, node: str, app: str, affinity: dict[str, Any]) -> PodInfo:
    raw = manifests.pod(name, labels={"app": app})
    raw["metadata"]["uid"] = f"uid-{name}"
    raw["spec"]["nodeName"] = node
    raw["spec"]["affinity"] = affinity
    return parse_pod(raw)


def test_scores_both_ways_per_topology_value_then_min_max() -> None:
    state = state_with(
        manifests.node("n1", labels={"zone": "a"}),
        manifests.node("n2", labels={"zone": "a"}),
        manifests.node("n3", labels={"zone": "b"}),
        manifests.node("n4"),  # no zone
    )
    placed = [
        pod_info("db1", node="n1", labels={"app": "db"}),
        pod_info("db2", node="n3", labels={"app": "db"}),
        # Required affinity to app=cache by zone: draws a cache pod to zone a (weight 1).
        with_affinity(
            "web",
            "n2",
            "web",
            {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [term("cache", "zone")]
                }
            },
        ),
        # Preferred anti-affinity against app=cache by host, weight 5: pushes it off n3.
        with_affinity(
            "lonely",
            "n3",
            "lonely",
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": weighted(5, "cache", HOST)
                }
            },
        ),
    ]
    for pod in placed:
        state.observe_bound(pod, terminal=False)
    incoming = with_affinity(
        "cache",
        "",
        "cache",
        {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": weighted(10, "db", "zone")
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": weighted(3, "db", HOST)
            },
        },
    )
    ctx = CycleContext(incoming, state)
    nodes = [state.nodes[n] for n in ("n1", "n2", "n3", "n4")]
    # Raw: n1 = zone a (10 + 1) - host n1 (3) = 8; n2 = 11; n3 = zone b (10) - host n3 (3 + 5) = 2;
    # n4 = 0. Scaled between 0 and 11, truncated.
    assert PodAffinityPreference().score(ctx, nodes) == [72.0, 100.0, 18.0, 0.0]


def test_nothing_applies_without_terms_either_way() -> None:
    state = state_with(manifests.node("n1", labels={"zone": "a"}))
    state.observe_bound(pod_info("db", node="n1", labels={"app": "db"}), terminal=False)
    ctx = CycleContext(pod_info("plain", labels={"app": "cache"}), state)
    assert affinity_preference(ctx) is None
    assert PodAffinityPreference().score(ctx, [state.nodes["n1"]]) is None
