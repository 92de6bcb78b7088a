"""PodTopologySpread's counting details that kube-scheduler's countPodsMatchSelector has."""

from __future__ import annotations

import random
from typing import Any

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.types import parse_pod
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise_dev import manifests

from ...helpers import state_with

ZONE = "topology.kubernetes.io/zone"


def pod(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    raw = manifests.pod(name, labels=labels)
    raw["metadata"]["uid"] = name
    raw["spec"].update(spec)
    return raw


def test_an_empty_selector_counts_no_pods_though_the_pod_matches_it() -> None:
    state = state_with(
        manifests.node("a1", labels={ZONE: "a"}), manifests.node("b1", labels={ZONE: "b"})
    )
    for i in range(3):
        placed = pod(f"w{i}", {"app": "web"}, nodeName="a1")
        state.observe_bound(parse_pod(placed), terminal=False)
    constraint = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {},
    }
    incoming = parse_pod(pod("new", {"app": "web"}, topologySpreadConstraints=[constraint]))
    # Counted, zone a would be 3 + 1 - 0 > 1 and refused; kube-scheduler counts 0 in both zones,
    # so the skew is 0 + 1 - 0 everywhere and a1 stays feasible.
    state.nodes["b1"].unschedulable = True
    result = schedule_one(incoming, state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0)))
    assert isinstance(result, Decision) and result.node == "a1"
