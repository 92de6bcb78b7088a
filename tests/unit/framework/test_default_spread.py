"""kube-scheduler's system default topology spreading: the selector (helper.DefaultSelector),
when the default constraints apply, and scores computed by hand from scoring.go's formulas."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from loadwise.framework import spread
from loadwise.framework.context import Basis, CycleContext
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.plugin import UNSIGNABLE
from loadwise.framework.plugins.topology_spread import SpreadPreference
from loadwise.framework.profile import DEFAULT_PROFILE
from loadwise.framework.selectors import Requirement, Selector
from loadwise.framework.types import Owner, PodInfo, parse_pod
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise.scheduler.state import ClusterState
from loadwise.scheduler.workload_selectors import WorkloadSelectors
from loadwise_dev import manifests

from ...helpers import state_with

ZONE = "topology.kubernetes.io/zone"
RS = ("apps/v1", "ReplicaSet", "web-5d8f")
_uid = iter(range(10**9))


def raw_pod(
    name: str = "p",
    ns: str = "default",
    labels: dict[str, str] | None = None,
    owner: tuple[str, str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    raw = manifests.pod(name, namespace=ns, labels=labels)
    raw["metadata"]["uid"] = f"u{next(_uid)}"
    if owner is not None:
        api_version, kind, owner_name = owner
        raw["metadata"]["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": f"owner-{owner_name}",
                "controller": True,
            }
        ]
    raw["spec"].update(spec)
    return raw


def service(name: str, selector: dict[str, str] | None, ns: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if selector is not None:
        spec["selector"] = selector
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def controller(name: str, selector: Any, ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": selector}}


def owner(api_version: str, kind: str, name: str) -> Owner:
    return Owner(api_version, kind, name, "uid")


WEB = {"app": "web", "tier": "front"}


# --- the selector ---------------------------------------------------------------------------------
def test_services_selecting_the_pod_in_its_namespace_are_merged() -> None:
    reg = WorkloadSelectors()
    reg.on_service_event(None, service("web", {"app": "web"}))
    reg.on_service_event("ADDED", service("front", {"tier": "front"}))
    reg.on_service_event(None, service("other", {"app": "db"}))  # does not select the pod
    reg.on_service_event(None, service("elsewhere", {"app": "web"}, ns="other"))
    reg.on_service_event(None, service("headless", None))  # nil selector: matches nothing
    selector = reg.default_selector("default", WEB, None)
    assert selector == Selector((("app", "web"), ("tier", "front")), ())
    assert reg.default_selector("default", {"app": "db"}, None) == Selector((("app", "db"),), ())
    assert reg.default_selector("default", {"x": "y"}, None) is None  # empty: no spreading


def test_replicaset_and_statefulset_selectors_add_their_requirements() -> None:
    reg = WorkloadSelectors()
    reg.on_service_event(None, service("web", {"app": "web"}))
    rs_selector = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
    }
    reg.on_controller_event("replicasets", None, controller("web-5d8f", rs_selector))
    reg.on_controller_event("statefulsets", None, controller("db", {"matchLabels": {"db": "x"}}))
    selector = reg.default_selector("default", WEB, owner("apps/v1", "ReplicaSet", "web-5d8f"))
    assert selector == Selector(
        (("app", "web"),),
        (Requirement("app", "In", ("web",)), Requirement("tier", "In", ("front",))),
    )
    ss = reg.default_selector("default", {"db": "x"}, owner("apps/v1", "StatefulSet", "db"))
    assert ss == Selector((), (Requirement("db", "In", ("x",)),))


def test_replication_controller_selector_is_merged_as_a_label_set() -> None:
    reg = WorkloadSelectors()
    reg.on_controller_event("replicationcontrollers", None, controller("rc", {"app": "web"}))
    got = reg.default_selector("default", WEB, owner("v1", "ReplicationController", "rc"))
    assert got == Selector((("app", "web"),), ())


@pytest.mark.parametrize(
    "who",
    [
        owner("extensions/v1beta1", "ReplicaSet", "web-5d8f"),  # not apps/v1: not looked up
        owner("apps/v1", "Deployment", "web-5d8f"),  # not a pod's controller kube-scheduler reads
        owner("apps/v1", "ReplicaSet", "unknown"),  # not (yet) listed
        owner("apps/v1", "StatefulSet", "web-5d8f"),  # looked up by kind and name
    ],
)
def test_other_owners_add_nothing(who: Owner) -> None:
    reg = WorkloadSelectors()
    reg.on_controller_event(
        "replicasets", None, controller("web-5d8f", {"matchLabels": {"app": "web"}})
    )
    assert reg.default_selector("default", WEB, who) is None


def test_deletions_and_relists_forget_selectors() -> None:
    reg = WorkloadSelectors()
    reg.on_service_event(None, service("web", {"app": "web"}))
    reg.on_service_event(None, service("front", {"tier": "front"}))
    reg.on_controller_event("replicasets", None, controller("a", {"matchLabels": WEB}))
    reg.on_controller_event("replicasets", None, controller("b", {"matchLabels": WEB}))
    reg.on_service_event("DELETED", service("web", {"app": "web"}))
    reg.on_controller_event("replicasets", "DELETED", controller("a", {}))
    assert reg.default_selector("default", WEB, None) == Selector((("tier", "front"),), ())
    assert reg.default_selector("default", WEB, owner(*RS[:2], "a")) == Selector(
        (("tier", "front"),), ()
    )
    reg.relisted_services(set())
    reg.relisted_controllers("replicasets", {"default/a"})
    assert reg.services == {} and reg.controllers["replicasets"] == {}
    # A Service whose selector was removed no longer selects anything.
    reg.on_service_event(None, service("web", {"app": "web"}))
    reg.on_service_event("MODIFIED", service("web", None))
    assert reg.services == {}


# --- when the defaults apply ----------------------------------------------------------------------
def web_state(*nodes: dict[str, Any]) -> ClusterState:
    state = state_with(*nodes)
    state.workloads.on_controller_event(
        "replicasets", None, controller(RS[2], {"matchLabels": {"app": "web"}})
    )
    return state


def test_default_constraints_only_for_pods_without_their_own() -> None:
    state = web_state(manifests.node("n1"))
    plain = parse_pod(raw_pod(labels=WEB, owner=RS))
    soft = spread.soft_constraints(plain, state)
    assert soft is not None and soft.system_default
    assert [(c.topology_key, c.max_skew, c.hard) for c in soft.constraints] == [
        ("kubernetes.io/hostname", 3, False),
        (ZONE, 5, False),
    ]
    own = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    # Hard constraints of its own: no ScheduleAnyway ones, and no defaults either.
    hard = parse_pod(raw_pod(labels=WEB, owner=RS, topologySpreadConstraints=own))
    assert spread.soft_constraints(hard, state) is None
    own[0]["whenUnsatisfiable"] = "ScheduleAnyway"
    mine = spread.soft_constraints(
        parse_pod(raw_pod(labels=WEB, owner=RS, topologySpreadConstraints=own)), state
    )
    assert mine is not None and not mine.system_default and len(mine.constraints) == 1
    assert spread.soft_constraints(parse_pod(raw_pod(labels=WEB)), state) is None  # no owner


def test_spread_preference_signs_defaulted_pods_unsignable_and_declares_its_inputs() -> None:
    state = web_state(manifests.node("n1"))
    plugin = SpreadPreference()
    assert {"owner", "labels", "namespace"} <= set(plugin.inputs.pod)
    assert "owner" in DEFAULT_PROFILE.pod_fields
    assert plugin.sign(CycleContext(parse_pod(raw_pod(labels=WEB, owner=RS)), state)) is UNSIGNABLE
    assert plugin.sign(CycleContext(parse_pod(raw_pod(labels={"x": "y"})), state)) == ()


# --- scores, as kube-scheduler computes them ------------------------------------------------------
def scenario() -> tuple[ClusterState, list[str]]:
    """n1, n2 in zone a, n3 in zone b, n4 without a zone; web pods: n1 2, n2 1, n4 1 (and, not
    counted: one in another namespace on n3, one terminating on n3, one unlabelled on n3)."""
    nodes = [
        manifests.node("n1", labels={ZONE: "a"}),
        manifests.node("n2", labels={ZONE: "a"}),
        manifests.node("n3", labels={ZONE: "b"}),
        manifests.node("n4"),
    ]
    state = web_state(*nodes)
    placed = [
        ("n1", raw_pod("w1", labels=WEB, owner=RS)),
        ("n1", raw_pod("w2", labels=WEB, owner=RS)),
        ("n2", raw_pod("w3", labels=WEB, owner=RS)),
        ("n4", raw_pod("w4", labels=WEB)),
        ("n3", raw_pod("x1", ns="other", labels=WEB)),
        ("n3", raw_pod("x2", labels={"app": "db"})),
    ]
    gone = raw_pod("x3", labels=WEB)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    placed.append(("n3", gone))
    for node, raw in placed:
        raw["spec"]["nodeName"] = node
        state.observe_bound(parse_pod(raw), terminal=False)
    return state, ["n1", "n2", "n3", "n4"]


def scores(state: ClusterState, pod: PodInfo, names: list[str]) -> list[float]:
    soft = spread.soft_constraints(pod, state)
    assert soft is not None
    return spread.soft_scores(pod, state, soft, [state.nodes[n] for n in names])


def normalize(raw: list[int]) -> list[int]:
    """NormalizeScore, integer arithmetic as in Go."""
    high, low = max(raw), min(raw)
    return [100 * (high + low - r) // high for r in raw]


def test_system_default_scores_match_kube_scheduler() -> None:
    state, names = scenario()
    host_w = math.log(4 + 2)  # hostname: 4 feasible nodes, none ignored
    zone_w = math.log(3 + 2)  # zone domains among feasible nodes: a, b and "" (n4, no label)
    # Per node: hostname count x host_w + (3 - 1), plus, if it has a zone, zone count x zone_w
    # + (5 - 1); zone a holds 3 web pods, b none. n4 lacks the zone label and is still scored.
    raw = [
        round(2 * host_w + 2 + 3 * zone_w + 4),  # n1: 14.41 -> 14
        round(1 * host_w + 2 + 3 * zone_w + 4),  # n2: 12.62 -> 13
        round(0 * host_w + 2 + 0 * zone_w + 4),  # n3: 6
        round(1 * host_w + 2),  # n4: 3.79 -> 4
    ]
    assert raw == [14, 13, 6, 4]
    expected = normalize(raw)
    assert expected == [28, 35, 85, 100]
    pod = parse_pod(raw_pod("new", labels=WEB, owner=RS))
    assert scores(state, pod, names) == expected
    # Only the feasible nodes make the domains and weights: without n4, "" is no zone domain.
    host_w, zone_w = math.log(3 + 2), math.log(2 + 2)
    raw = [round(2 * host_w + 2 + 3 * zone_w + 4), round(host_w + 2 + 3 * zone_w + 4), 6]
    assert scores(state, pod, names[:3]) == normalize(raw)


def test_own_schedule_anyway_constraints_ignore_nodes_missing_the_key() -> None:
    state, names = scenario()
    own = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    pod = parse_pod(raw_pod("new", labels=WEB, topologySpreadConstraints=own))
    zone_w = math.log(2 + 2)  # a and b; n4 is ignored (requireAllTopologies)
    # Zone a: 3 matching pods (w4 on n4 is not counted: n4 has no zone), b: 0.
    raw = [round(3 * zone_w), round(3 * zone_w), 0]  # 4, 4, 0
    assert scores(state, pod, names) == [*normalize(raw), 0]  # n4, ignored, scores 0
    assert normalize(raw) == [0, 0, 100]


def test_a_node_without_a_zone_is_scored_by_hostname_alone() -> None:
    state = web_state(manifests.node("n1", labels={ZONE: "a"}), manifests.node("n2"))
    pod = parse_pod(raw_pod("new", labels=WEB, owner=RS))
    # No web pods: hostname 0 + (3 - 1) on both, zone 0 + (5 - 1) on n1 only.
    assert scores(state, pod, ["n1", "n2"]) == normalize([6, 2]) == [33, 100]


def test_a_replicaset_of_best_effort_pods_is_spread_over_equal_nodes() -> None:
    """The issue's case: 10 replicas, 6 idle nodes; kube-scheduler places 2/2/2/2/1/1."""
    state = web_state(*(manifests.node(f"n{i}") for i in range(6)))
    for i in range(10):
        raw = raw_pod(f"web-{i}", labels=WEB, owner=RS)
        del raw["spec"]["containers"][0]["resources"]  # BestEffort
        pod = parse_pod(raw)
        result = schedule_one(pod, state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(i)))
        assert isinstance(result, Decision)
        state.assume(pod, result.node, at=0.0)
    per_node = [sum(1 for _ in state.pods_on(f"n{i}")) for i in range(6)]
    assert sorted(per_node) == [1, 1, 2, 2, 2, 2]
