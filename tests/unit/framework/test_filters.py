"""Each filter against hand-made nodes and pods, with kube-scheduler's expected outcome."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, Unschedulable, schedule_one
from loadwise.framework.types import parse_pod
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise.scheduler.state import ClusterState
from loadwise_dev import manifests

from ...helpers import state_with

_uid = iter(range(10**9))


def pod(
    name: str = "p", ns: str = "default", labels: dict[str, str] | None = None, **spec: Any
) -> Any:
    raw = manifests.pod(name, namespace=ns, labels=labels)
    raw["metadata"]["uid"] = f"u{next(_uid)}"
    raw["spec"].update(spec)
    return raw


def place(state: ClusterState, raw: Any, node: str) -> None:
    raw["spec"]["nodeName"] = node
    state.observe_bound(parse_pod(raw), terminal=False)


def outcome(state: ClusterState, raw: Any) -> str:
    result = schedule_one(parse_pod(raw), state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0)))
    return result.node if isinstance(result, Decision) else "unschedulable"


def feasible(state: ClusterState, raw: Any) -> set[str]:
    """Every node the pod may go to: schedule it repeatedly, excluding each answer."""
    seen: set[str] = set()
    while True:
        for name in seen:
            state.nodes[name].unschedulable = True
        result = schedule_one(
            parse_pod(raw), state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0))
        )
        for name in seen:
            state.nodes[name].unschedulable = False
        if not isinstance(result, Decision):
            return seen
        seen.add(result.node)


def zoned(*names_zones: tuple[str, str], **extra: Any) -> ClusterState:
    return state_with(
        *(
            manifests.node(n, labels={"topology.kubernetes.io/zone": z}, **extra)
            for n, z in names_zones
        )
    )


# --- taints and cordons -------------------------------------------------------------------------
def test_untolerated_taint_message_names_the_taint() -> None:
    node = manifests.node("gpu")
    node["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    result = schedule_one(
        parse_pod(pod()), state_with(node), Basis(DEFAULT_POLICY, {}, 0, random.Random())
    )
    assert isinstance(result, Unschedulable)
    assert (
        result.message
        == "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
    )


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "gpu"}, True),  # empty effect: all effects
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key + Exists: everything
        ({"key": "dedicated", "value": "cpu"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_matching(toleration: dict[str, str], ok: bool) -> None:
    node = manifests.node("gpu")
    node["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    placed = outcome(state_with(node), pod(tolerations=[toleration]))
    assert placed == ("gpu" if ok else "unschedulable")


def test_prefer_no_schedule_only_scores() -> None:
    soft = manifests.node("soft")
    soft["spec"]["taints"] = [{"key": "spot", "value": "", "effect": "PreferNoSchedule"}]
    state = state_with(soft, manifests.node("plain"))
    assert feasible(state, pod()) == {"soft", "plain"}
    assert outcome(state, pod()) == "plain"


def test_cordoned_node_unless_pod_tolerates_unschedulable() -> None:
    state = state_with(manifests.node("cordoned", unschedulable=True))
    assert outcome(state, pod()) == "unschedulable"
    toleration = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
    assert outcome(state, pod(tolerations=[toleration])) == "cordoned"


# --- node affinity --------------------------------------------------------------------------------
def _labelled() -> ClusterState:
    return state_with(
        manifests.node("a", labels={"disk": "ssd", "cores": "8"}),
        manifests.node("b", labels={"disk": "hdd", "cores": "4"}),
        manifests.node("c", labels={}),
    )


def _required(
    *expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"key": "disk", "operator": "In", "values": ["ssd"]}, {"a"}),
        ({"key": "disk", "operator": "NotIn", "values": ["ssd"]}, {"b", "c"}),  # absent matches
        ({"key": "disk", "operator": "Exists"}, {"a", "b"}),
        ({"key": "disk", "operator": "DoesNotExist"}, {"c"}),
        ({"key": "cores", "operator": "Gt", "values": ["4"]}, {"a"}),
        ({"key": "cores", "operator": "Lt", "values": ["8"]}, {"b"}),
        ({"key": "cores", "operator": "Gt", "values": ["x"]}, set()),
    ],
)
def test_required_node_affinity_operators(expression: dict[str, Any], expected: set[str]) -> None:
    assert feasible(_labelled(), pod(affinity=_required(expression))) == expected


def test_match_fields_and_node_selector_combine() -> None:
    affinity = _required(fields=[{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}])
    assert feasible(_labelled(), pod(affinity=affinity)) == {"a", "b"}
    both = pod(affinity=affinity, nodeSelector={"disk": "hdd"})
    assert feasible(_labelled(), both) == {"b"}


def test_empty_term_matches_nothing_and_message() -> None:
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}
        }
    }
    result = schedule_one(
        parse_pod(pod(affinity=affinity)),
        _labelled(),
        Basis(DEFAULT_POLICY, {}, 0, random.Random()),
    )
    assert isinstance(result, Unschedulable)
    assert (
        result.message
        == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )


def test_preferred_node_affinity_scores() -> None:
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]
                    },
                }
            ]
        }
    }
    assert outcome(_labelled(), pod(affinity=preferred)) == "b"


# --- host ports -----------------------------------------------------------------------------------
def _port(port: int, ip: str = "", protocol: str = "TCP") -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": protocol}
    if ip:
        entry["hostIP"] = ip
    return entry


@pytest.mark.parametrize(
    ("used", "wanted", "conflict"),
    [
        (_port(80), _port(80), True),
        (_port(80), _port(81), False),
        (_port(80, protocol="UDP"), _port(80), False),
        (_port(80, ip="10.0.0.1"), _port(80, ip="10.0.0.2"), False),
        (_port(80, ip="10.0.0.1"), _port(80), True),  # 0.0.0.0 overlaps every address
        (_port(80), _port(80, ip="10.0.0.2"), True),
    ],
)
def test_host_port_conflicts(used: dict[str, Any], wanted: dict[str, Any], conflict: bool) -> None:
    state = state_with(manifests.node("n"))
    existing = pod("existing")
    existing["spec"]["containers"][0]["ports"] = [used]
    place(state, existing, "n")
    incoming = pod("incoming")
    incoming["spec"]["containers"][0]["ports"] = [wanted]
    assert outcome(state, incoming) == ("unschedulable" if conflict else "n")


# --- inter-pod affinity ---------------------------------------------------------------------------
def _term(
    labels: dict[str, str], key: str = "topology.kubernetes.io/zone", **extra: Any
) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def _affinity(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def test_pod_affinity_follows_matching_pods_zone() -> None:
    state = zoned(("a1", "a"), ("a2", "a"), ("b1", "b"))
    place(state, pod("db", labels={"app": "db"}), "b1")
    incoming = pod(affinity=_affinity("podAffinity", _term({"app": "db"})))
    assert feasible(state, incoming) == {"b1"}


def test_pod_affinity_first_of_group_goes_anywhere_with_the_topology() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    state.upsert_node(manifests.node("nozone"))
    first = pod(labels={"app": "web"}, affinity=_affinity("podAffinity", _term({"app": "web"})))
    assert feasible(state, first) == {"a1", "b1"}
    # ... but not when it does not match its own term: then it waits for a matching pod.
    other = pod(labels={"app": "x"}, affinity=_affinity("podAffinity", _term({"app": "web"})))
    assert feasible(state, other) == set()


def test_pod_anti_affinity_avoids_matching_pods_domain() -> None:
    state = zoned(("a1", "a"), ("a2", "a"), ("b1", "b"))
    place(state, pod("web-0", labels={"app": "web"}), "a1")
    incoming = pod(
        labels={"app": "web"}, affinity=_affinity("podAntiAffinity", _term({"app": "web"}))
    )
    assert feasible(state, incoming) == {"b1"}


def test_existing_pods_anti_affinity_repels_incoming_pod() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    loner = pod(
        "loner",
        labels={"app": "loner"},
        affinity=_affinity("podAntiAffinity", _term({"app": "web"}, key="kubernetes.io/hostname")),
    )
    place(state, loner, "a1")
    result = schedule_one(
        parse_pod(pod(labels={"app": "web"})), state, Basis(DEFAULT_POLICY, {}, 0, random.Random())
    )
    assert isinstance(result, Decision) and result.node == "b1"
    assert feasible(state, pod(labels={"app": "other"})) == {"a1", "b1"}


def test_affinity_namespaces_default_to_own_and_selector_widens() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    state.upsert_namespace("team-x", {"team": "x"})
    place(state, pod("db", ns="team-x", labels={"app": "db"}), "b1")
    same_ns_only = pod(ns="default", affinity=_affinity("podAffinity", _term({"app": "db"})))
    assert feasible(state, same_ns_only) == set()
    by_selector = pod(
        ns="default",
        affinity=_affinity(
            "podAffinity", _term({"app": "db"}, namespaceSelector={"matchLabels": {"team": "x"}})
        ),
    )
    assert feasible(state, by_selector) == {"b1"}
    listed = pod(
        ns="default", affinity=_affinity("podAffinity", _term({"app": "db"}, namespaces=["team-x"]))
    )
    assert feasible(state, listed) == {"b1"}


# --- topology spread ------------------------------------------------------------------------------
def _spread(
    max_skew: int = 1, key: str = "topology.kubernetes.io/zone", **extra: Any
) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            **extra,
        }
    ]


def test_spread_max_skew() -> None:
    state = zoned(("a1", "a"), ("b1", "b"), ("c1", "c"))
    place(state, pod("w0", labels={"app": "web"}), "a1")
    place(state, pod("w1", labels={"app": "web"}), "b1")
    incoming = pod(labels={"app": "web"}, topologySpreadConstraints=_spread())
    assert feasible(state, incoming) == {"c1"}
    relaxed = pod(labels={"app": "web"}, topologySpreadConstraints=_spread(max_skew=2))
    assert feasible(state, relaxed) == {"a1", "b1", "c1"}


def test_spread_node_without_the_key_is_refused_with_reason() -> None:
    state = zoned(("a1", "a"))
    state.upsert_node(manifests.node("nozone"))
    result = schedule_one(
        parse_pod(pod(labels={"app": "web"}, topologySpreadConstraints=_spread())),
        state,
        Basis(DEFAULT_POLICY, {}, 0, random.Random()),
    )
    assert isinstance(result, Decision) and result.node == "a1"
    state.nodes["a1"].unschedulable = True
    result = schedule_one(
        parse_pod(pod(labels={"app": "web"}, topologySpreadConstraints=_spread())),
        state,
        Basis(DEFAULT_POLICY, {}, 0, random.Random()),
    )
    assert isinstance(result, Unschedulable)
    assert (
        "1 node(s) didn't match pod topology spread constraints (missing required label)"
        in result.message
    )


def test_spread_min_domains_forces_new_domains() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    place(state, pod("w0", labels={"app": "web"}), "a1")
    place(state, pod("w1", labels={"app": "web"}), "b1")
    # Two domains exist but minDomains is 3: the global minimum counts as 0, skew 1+1-0 > 1.
    incoming = pod(labels={"app": "web"}, topologySpreadConstraints=_spread(minDomains=3))
    assert feasible(state, incoming) == set()


def test_spread_node_affinity_policy() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    place(state, pod("w0", labels={"app": "web"}), "b1")
    place(state, pod("w1", labels={"app": "web"}), "b1")
    selector = {"topology.kubernetes.io/zone": "b"}
    # Honor (default): zone a is not eligible, so b's count is the minimum: b is fine.
    honor = pod(labels={"app": "web"}, nodeSelector=selector, topologySpreadConstraints=_spread())
    assert feasible(state, honor) == {"b1"}
    # Ignore: zone a (0 pods) counts, b would be skew 3 > 1.
    ignore = pod(
        labels={"app": "web"},
        nodeSelector=selector,
        topologySpreadConstraints=_spread(nodeAffinityPolicy="Ignore"),
    )
    assert feasible(state, ignore) == set()


def test_spread_counts_only_same_namespace_and_live_pods() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    place(state, pod("other-ns", ns="elsewhere", labels={"app": "web"}), "a1")
    leaving = pod("leaving", labels={"app": "web"})
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    place(state, leaving, "a1")
    incoming = pod(labels={"app": "web"}, topologySpreadConstraints=_spread())
    assert feasible(state, incoming) == {"a1", "b1"}


def test_schedule_anyway_only_scores() -> None:
    state = zoned(("a1", "a"), ("b1", "b"))
    place(state, pod("w0", labels={"app": "web"}), "a1")
    soft = _spread()
    soft[0]["whenUnsatisfiable"] = "ScheduleAnyway"
    incoming = pod(labels={"app": "web"}, topologySpreadConstraints=soft)
    assert feasible(state, incoming) == {"a1", "b1"}
    assert outcome(state, incoming) == "b1"


# --- odd input ------------------------------------------------------------------------------------
def test_ephemeral_volume_kinds_are_fine() -> None:
    raw = pod(
        volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}]
    )
    assert outcome(state_with(manifests.node("n")), raw) == "n"


def test_scheduling_gates_are_parsed() -> None:
    assert parse_pod(pod(schedulingGates=[{"name": "wait"}])).gated


@pytest.mark.parametrize(
    ("value", "matches"), [("8", True), ("+8", True), ("1_0", False), (" 8", False)]
)
def test_gt_parses_integers_like_go(value: str, matches: bool) -> None:
    state = state_with(manifests.node("n", labels={"cores": value}))
    gt = _required({"key": "cores", "operator": "Gt", "values": ["4"]})
    assert feasible(state, pod(affinity=gt)) == ({"n"} if matches else set())
