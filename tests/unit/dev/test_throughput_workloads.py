"""bench/throughput's workloads (loadwise_dev.workloads): the shape of the generated nodes and
pods, the mixed blend, the anti-affinity size check, the anchors, and the placement check. The API
server's validation and both schedulers binding them are checked by running the bench."""

from __future__ import annotations

import os
from collections import Counter
from types import ModuleType
from typing import Any

import pytest

from loadwise_dev import manifests, workloads
from loadwise_dev.workloads import HOST_KEY, POOL_KEY, ZONE_KEY

from ...helpers import load_bench


def _pod(workload: str, i: int = 0) -> dict[str, Any]:
    return workloads.pod(workload, i, f"p-{i:05d}", "throughput", "loadwise-scheduler")


def test_basic_is_the_pod_and_node_the_bench_always_used() -> None:
    expected = manifests.pod(
        "p-00000",
        namespace="throughput",
        scheduler_name="loadwise-scheduler",
        cpu="100m",
        memory="128Mi",
    )
    assert _pod("basic") == expected
    assert all(workloads.node_labels("basic", i) == {} for i in range(20))
    assert workloads.anchors("basic", [f"n{i}" for i in range(20)]) == []


def test_nodes_get_zones_round_robin_and_pools() -> None:
    labels = [workloads.node_labels("spread", i) for i in range(100)]
    zones = Counter(node[ZONE_KEY] for node in labels)
    assert zones == {f"zone-{k}": 10 for k in range(10)}
    assert [labels[i][ZONE_KEY] for i in (0, 1, 9, 10, 11, 19)] == [
        "zone-0", "zone-1", "zone-9", "zone-1", "zone-2", "zone-0"
    ]  # fmt: skip
    affine = sum(1 for node in labels if node[POOL_KEY] in workloads.AFFINE_POOLS)
    assert affine == 40  # a subset: 2 pools of 5
    # Neither zones nor pools follow the background CPU the bench gives node i (by i % 10).
    level = [i % 10 for i in range(100)]
    for key, per_value in ((ZONE_KEY, 10), (POOL_KEY, 20)):
        for value in {node[key] for node in labels}:
            levels = Counter(level[i] for i in range(100) if labels[i][key] == value)
            assert levels == dict.fromkeys(range(10), per_value // 10), (key, value)
    pairs = Counter((node[ZONE_KEY], node[POOL_KEY]) for node in labels)
    assert len(pairs) == 50  # each zone spans several pools


@pytest.mark.parametrize("workload", [w for w in workloads.WORKLOADS if w != "basic"])
def test_every_pod_keeps_the_basics(workload: str) -> None:
    for i in range(20):
        pod = _pod(workload, i)
        assert pod["metadata"]["name"] == f"p-{i:05d}"
        assert pod["metadata"]["namespace"] == "throughput"
        assert pod["spec"]["schedulerName"] == "loadwise-scheduler"
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert requests == {"cpu": "100m", "memory": "128Mi"}


@pytest.mark.parametrize(
    ("workload", "when"), [("spread", "DoNotSchedule"), ("preferred-spread", "ScheduleAnyway")]
)
def test_spread(workload: str, when: str) -> None:
    pod = _pod(workload)
    assert pod["metadata"]["labels"] == {"app": workload}
    assert pod["spec"]["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": ZONE_KEY,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": workload}},
        }
    ]
    assert "affinity" not in pod["spec"]


def test_anti_affinity_by_hostname_against_its_own_label() -> None:
    pod = _pod("anti-affinity")
    terms = pod["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms == [
        {"labelSelector": {"matchLabels": {"app": "anti-affinity"}}, "topologyKey": HOST_KEY}
    ]
    assert pod["metadata"]["labels"] == {"app": "anti-affinity"}


def test_affinity_joins_the_anchors_by_zone() -> None:
    pod = _pod("affinity")
    terms = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [
        {
            "labelSelector": {"matchLabels": {"app": "anchor"}},
            "topologyKey": ZONE_KEY,
            "namespaces": ["default"],
        }
    ]
    # The pods do not match their own term: only anchor zones are feasible, whatever is placed.
    assert pod["metadata"]["labels"]["app"] != "anchor"


def test_preferred_affinity_weights_are_valid_and_vary() -> None:
    weights = set()
    for i in range(300):
        affinity = _pod("preferred-affinity", i)["spec"]["affinity"]["podAffinity"]
        (term,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        assert 1 <= term["weight"] <= 100
        assert term["podAffinityTerm"]["topologyKey"] == ZONE_KEY
        weights.add(term["weight"])
    assert weights == set(range(1, 101))


def test_node_affinity_on_a_label_some_nodes_carry() -> None:
    affinity = _pod("node-affinity")["spec"]["affinity"]["nodeAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {
        "matchExpressions": [{"key": POOL_KEY, "operator": "In", "values": ["pool-0", "pool-1"]}]
    }


def test_mixed_is_a_deterministic_blend() -> None:
    kinds = [workloads.kind("mixed", i) for i in range(1000)]
    assert kinds == [workloads.kind("mixed", i) for i in range(1000)]
    counts = Counter(kinds)
    assert counts["basic"] == 400
    assert {k: v for k, v in counts.items() if k != "basic"} == {
        k: 100
        for k in workloads.WORKLOADS
        if k not in ("basic", "mixed", "volumes", "gangs", "devices")
    }  # volumes, gangs, devices: workloads of their own (their objects are made per runner)
    for i in (1, 3, 4, 6, 7, 9):  # each pod is built as its kind says
        assert _pod("mixed", i) == _pod(kinds[i], i)
    assert _pod("mixed", 0) == _pod("basic", 0)


def test_anti_affinity_needs_a_node_per_pod() -> None:
    assert workloads.refusal("anti-affinity", 100, 100) is None
    message = workloads.refusal("anti-affinity", 100, 101)
    assert message is not None and "101 anti-affinity pods for 100 nodes" in message
    assert workloads.refusal("mixed", 100, 1000) is None  # 100 anti-affinity pods
    assert workloads.refusal("mixed", 100, 1003) is None  # pod 1003 is the 101st
    assert workloads.refusal("mixed", 100, 1004) is not None
    assert workloads.refusal("spread", 1, 5000) is None
    assert workloads.refusal("nope", 1, 1) is not None


def test_gangs_of_ten_each_a_pod_group_made_first_and_judged_all_or_none() -> None:
    names = [f"lo-{i:05d}" for i in range(30)]
    groups = workloads.gangs(names, "throughput")
    assert [g["metadata"]["name"] for g in groups] == ["lo-g0000", "lo-g0001", "lo-g0002"]
    assert all(g["spec"]["schedulingPolicy"] == {"gang": {"minCount": 10}} for g in groups)
    pods = [
        workloads.pod("gangs", i, n, "throughput", "loadwise-scheduler")
        for i, n in enumerate(names)
    ]
    assert Counter(p["spec"]["schedulingGroup"]["podGroupName"] for p in pods) == {
        "lo-g0000": 10,
        "lo-g0001": 10,
        "lo-g0002": 10,
    }
    assert workloads.refusal("gangs", 10, 30) is None
    assert workloads.refusal("gangs", 10, 35) is not None
    whole = {i: "n0" for i in range(20)}  # groups 0 and 1 whole, group 2 not at all
    assert workloads.check("gangs", whole, {"n0": {}})["violations"] == 0
    partial = {**whole, 20: "n0", 21: "n0"}
    assert workloads.check("gangs", partial, {"n0": {}}) == {
        "gangs_partly_bound": 1,
        "violations": 1,
    }


def test_anchors_one_per_anchor_zone_bound_among_existing_pods() -> None:
    nodes = [f"node-{i:05d}" for i in range(100)]
    for workload in ("affinity", "preferred-affinity", "mixed"):
        anchors = workloads.anchors(workload, nodes)
        assert len(anchors) == workloads.ANCHOR_ZONES
        zones = {
            workloads.node_labels(workload, nodes.index(a["spec"]["nodeName"]))[ZONE_KEY]
            for a in anchors
        }
        assert zones == set(workloads.anchor_zones(100)) == {"zone-0", "zone-1", "zone-2"}
        for anchor in anchors:
            assert anchor["metadata"]["namespace"] == "default"
            assert anchor["metadata"]["labels"] == {"app": "anchor"}
            assert anchor["spec"]["schedulerName"] == "none"
    assert len(workloads.anchors("affinity", nodes[:2])) == 2  # only zones that have nodes
    for workload in ("spread", "anti-affinity", "node-affinity"):
        assert workloads.anchors(workload, nodes) == []


def _labels(workload: str, n: int) -> dict[str, dict[str, str]]:
    return {f"n{i}": workloads.node_labels(workload, i) for i in range(n)}


def test_check_passes_correct_placements_and_counts_breaches() -> None:
    labels = _labels("mixed", 20)
    # spread pods one per zone in turn; anti-affinity pods one per node; the rest on n0
    # (zone-0, pool-0).
    good = {}
    turn: Counter[str] = Counter()
    for i in range(200):
        shape = workloads.kind("mixed", i)
        good[i] = f"n{turn[shape] % 20}" if shape in ("spread", "anti-affinity") else "n0"
        turn[shape] += 1
    result = workloads.check("mixed", good, labels)
    assert result["violations"] == 0
    assert result["spread_skew"] <= 1
    assert result["affinity_in_anchor_zones"] == 1.0

    assert workloads.check("anti-affinity", {0: "n1", 1: "n1", 2: "n1"}, labels)["violations"] == 2
    outside = workloads.check("affinity", {0: "n5", 1: "n0"}, labels)  # zone-5 has no anchor
    assert outside["violations"] == 1 and outside["affinity_in_anchor_zones"] == 0.5
    assert workloads.check("node-affinity", {0: "n2", 1: "n3"}, labels)["violations"] == 1  # 4, 1
    lopsided = workloads.check("spread", {i: "n0" for i in range(3)}, labels)
    assert lopsided["spread_skew"] == 3 and lopsided["violations"] == 2
    preferred = workloads.check("preferred-spread", {i: "n0" for i in range(3)}, labels)
    assert preferred == {"preferred-spread_skew": 3, "violations": 0}  # reported, not judged
    assert workloads.check("basic", {0: "n0"}, _labels("basic", 2)) == {"violations": 0}


def _bench() -> ModuleType:
    return load_bench("throughput")


def test_table_header_names_the_workload() -> None:
    data = {
        "mode": "backlog",
        "workload": "spread",
        "nodes": 100,
        "pods": 300,
        "existing_pods": 0,
        "pinned": True,
        "ratio_vs_kube_scheduler": 2.0,
        "ratio_vs_ceiling": None,
        "runners": {
            "kube-scheduler": {"pods_per_s": 100.0, "bound": 300, "checks": {"violations": 0}},
            "loadwise": {"pods_per_s": 200.0, "bound": 300, "checks": {"violations": 0}},
        },
    }
    text = _bench().markdown(data)
    assert text.startswith("backlog, workload spread, 100 nodes, 300 pods, 0 existing, pinned")
    assert "| spread | loadwise | 200.0 | 300/300 | 0 |" in text


def test_pin_needs_cpus_0_and_1(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    message = bench.pin_refusal()
    assert message is not None and "--pin needs CPUs 0 and 1" in message
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert bench.pin_refusal() is None


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_children_started_inside_spawning_on_inherit_the_cpu() -> None:
    import subprocess

    bench = _bench()
    before = os.sched_getaffinity(0)
    with bench.spawning_on(1):
        child = subprocess.run(
            ["grep", "Cpus_allowed_list", "/proc/self/status"],
            capture_output=True,
            text=True,
            check=True,
        )
    assert child.stdout.split()[-1] == "1"
    assert os.sched_getaffinity(0) == before
