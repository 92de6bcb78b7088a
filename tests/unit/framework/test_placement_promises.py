"""Issue 11's scoring promises on synthetic clusters: pods without requests never herd, Pack
fills to a target, extra dimensions and learned estimates count, tenants spread."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.scoring import pod_estimate
from loadwise.framework.types import PodInfo, parse_pod
from loadwise.policies.policy import Policy, parse_spec
from loadwise.resources import NONZERO_CPU, NONZERO_MEMORY, pod_requests
from loadwise.scheduler.state import ClusterState
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

NOW = 1_000_000.0


def spec_policy(**spec: Any) -> Policy:
    return Policy("p", parse_spec(spec))


def best_effort(name: str, labels: dict[str, str] | None = None, owner: str = "") -> PodInfo:
    raw = manifests.pod(name, labels=labels)
    del raw["spec"]["containers"][0]["resources"]
    raw["metadata"]["uid"] = f"uid-{name}"
    if owner:
        raw["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": "rs",
                "controller": True,
            }
        ]
    return parse_pod(raw)


def place(
    state: ClusterState,
    pods: list[PodInfo],
    policy: Policy,
    samples: dict[str, NodeSample],
    seed: int = 1,
    learned: Any = None,
) -> Counter[str]:
    rng = random.Random(seed)
    placed: Counter[str] = Counter()
    for pod in pods:
        result = schedule_one(pod, state, Basis(policy, samples, NOW, rng, learned))
        assert isinstance(result, Decision), result
        state.assume(pod, result.node, at=NOW)
        placed[result.node] += 1
    return placed


def uneven(n: int = 6) -> tuple[ClusterState, dict[str, NodeSample]]:
    state = state_with(*(manifests.node(f"n{i}", cpu="4") for i in range(n)))
    usage = {f"n{i}": NodeSample(0.1 + 0.1 * i, 0.3, NOW - 1) for i in range(n)}
    return state, usage


def test_missing_requests_count_as_kube_schedulers_defaults() -> None:
    assert best_effort("a").requests.nonzero == (NONZERO_CPU, NONZERO_MEMORY)
    assert best_effort("a").requests.amounts == {}  # fitting still sees nothing requested
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "0"}}},  # explicit 0 stays 0
            {"name": "b", "resources": {"limits": {"memory": "1Gi"}}},
        ]
    }
    assert pod_requests(spec).nonzero == (0 + NONZERO_CPU, NONZERO_MEMORY + (1 << 30))
    full = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    assert pod_requests(full).nonzero == (1000, 1 << 30)


def test_replicas_without_requests_do_not_herd() -> None:
    """The issue's case: 10 BestEffort replicas on six nodes of uneven load. Each is estimated
    at 1.5 x 100m (3.75% of a 4-cpu node), so the idlest node fills to its neighbour's level
    and the rest spread; before, every replica went to n0."""
    state, usage = uneven()
    placed = place(state, [best_effort(f"r{i}") for i in range(10)], spec_policy(), usage)
    assert max(placed.values()) <= 5 and len(placed) >= 3, placed
    assert state.scored_requests("n0")[0] == placed["n0"] * NONZERO_CPU


def test_pack_fills_the_fullest_node_under_the_target_then_spills() -> None:
    state = state_with(*(manifests.node(n, cpu="4") for n in ("idle", "half", "full", "hot")))
    usage = {
        "idle": NodeSample(0.05, 0.1, NOW - 1),
        "half": NodeSample(0.50, 0.1, NOW - 1),
        "full": NodeSample(0.66, 0.1, NOW - 1),
        "hot": NodeSample(0.85, 0.1, NOW - 1),
    }
    pack = spec_policy(strategy="Pack", targetUtilization={"cpu": 70, "memory": 80})
    pods = [pod_info(f"p{i}", cpu="100m") for i in range(8)]
    order = []
    rng = random.Random(1)
    for pod in pods:
        result = schedule_one(pod, state, Basis(pack, usage, NOW, rng))
        assert isinstance(result, Decision)
        state.assume(pod, result.node, at=NOW)
        order.append(result.node)
    # Each pod is estimated at 150m = 3.75%: "full" takes one (0.6975), then "half" fills up
    # to the target (5 pods: 0.6875), and "idle" and "hot" stay untouched until then.
    assert order[0] == "full"
    assert order[1:6] == ["half"] * 5
    assert "hot" not in order and order.count("idle") <= 2
    spread = place(
        state_with(*(manifests.node(n, cpu="4") for n in usage)),
        [pod_info(f"s{i}") for i in range(3)],
        spec_policy(),
        usage,
    )
    assert spread["idle"] == 3  # the default strategy does the opposite


def test_pack_spills_to_the_least_loaded_when_nothing_stays_under_target() -> None:
    state = state_with(*(manifests.node(n, cpu="4") for n in ("a", "b")))
    usage = {"a": NodeSample(0.72, 0.1, NOW - 1), "b": NodeSample(0.75, 0.1, NOW - 1)}
    pack = spec_policy(strategy="Pack", targetUtilization={"cpu": 70, "memory": 80})
    result = schedule_one(pod_info(), state, Basis(pack, usage, NOW, random.Random(1)))
    assert isinstance(result, Decision) and result.node == "a"


def test_extra_dimension_weights_and_hot_threshold() -> None:
    state = state_with(manifests.node("gpu-busy"), manifests.node("cpu-busy"))
    usage = {
        "gpu-busy": NodeSample(0.1, 0.1, NOW - 1, extra={"gpu": 0.95}),
        "cpu-busy": NodeSample(0.5, 0.1, NOW - 1, extra={"gpu": 0.1}),
    }
    rng = random.Random(1)
    plain = schedule_one(pod_info(), state, Basis(spec_policy(), usage, NOW, rng))
    assert isinstance(plain, Decision) and plain.node == "gpu-busy"  # gpu not in the policy
    gpu = spec_policy(dimensions=[{"name": "gpu", "weight": 1, "hotThreshold": 90}])
    result = schedule_one(pod_info(), state, Basis(gpu, usage, NOW, rng))
    assert isinstance(result, Decision)
    assert (result.node, result.hot_skipped) == ("cpu-busy", 1)
    weighted = spec_policy(dimensions=[{"name": "gpu", "weight": 5}])  # no threshold: weight
    result = schedule_one(pod_info(), state, Basis(weighted, usage, NOW, rng))
    assert isinstance(result, Decision) and result.node == "cpu-busy"
    assert result.chosen.extra == (0.1,)


class Profiles:
    def __init__(
        self,
        known: dict[str, tuple[int, int]],
        ratios: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        self.known = known
        self.ratios = ratios or {}

    def estimate(self, workload: str) -> tuple[int, int] | None:
        return self.known.get(workload)

    def ratio(self, namespace: str) -> tuple[float, float] | None:
        return self.ratios.get(namespace)


def test_learned_usage_replaces_the_requests_estimate() -> None:
    """Two nodes equally loaded; n0 got two pods of a workload known to use 1.5 cpu each, n1
    two of one known to use 50m. Requests (100m each) say the nodes are equal; learned usage
    says n0 is 3 cpu busier, so the next pod goes to n1."""
    state = state_with(manifests.node("n0", cpu="8"), manifests.node("n1", cpu="8"))
    usage = {n: NodeSample(0.2, 0.1, NOW - 1) for n in ("n0", "n1")}
    for i in range(2):
        state.assume(best_effort(f"h{i}", owner="hungry"), "n0", at=NOW)
        state.assume(best_effort(f"i{i}", owner="idle"), "n1", at=NOW)
    profiles = Profiles(
        {"default/ReplicaSet/hungry": (1500, 0), "default/ReplicaSet/idle": (50, 0)}
    )
    pod = best_effort("next", owner="other")
    result = schedule_one(pod, state, Basis(spec_policy(), usage, NOW, random.Random(1), profiles))
    assert isinstance(result, Decision) and result.node == "n1"
    assert result.chosen.cpu == 0.2 + (2 * 50 + 1.5 * 100) / 8000  # learned, learned, requests
    off = spec_policy(learnedEstimate=False)
    picks = {
        schedule_one(pod, state, Basis(off, usage, NOW, random.Random(s), profiles)).node  # type: ignore[union-attr]
        for s in range(12)
    }
    assert picks == {"n0", "n1"}  # by requests they are equal: ties broken at random


def test_a_pod_of_no_known_workload_is_estimated_by_its_namespace_ratio() -> None:
    """placementEstimate 1.5 says a 4-cpu pod would tip a 40% node of 8 cpus over 80%; its
    namespace's pods are measured to use 30% of their requests, so it fits there."""
    state = state_with(manifests.node("n0", cpu="8"))
    usage = {"n0": NodeSample(0.4, 0.1, NOW - 1)}
    pod = pod_info("e0", cpu="4")
    hot = schedule_one(pod, state, Basis(spec_policy(), usage, NOW, random.Random(1), None))
    assert isinstance(hot, Decision) and hot.all_hot
    profiles = Profiles({}, {"default": (0.3, 0.5)})
    basis = Basis(spec_policy(), usage, NOW, random.Random(1), profiles)
    assert pod_estimate(pod, (1.5, 1.0), profiles) == (1200, 0.5 * pod.requests.nonzero[1])
    cool = schedule_one(pod, state, basis)
    assert isinstance(cool, Decision) and not cool.all_hot and cool.chosen.cpu == 0.4 + 0.15


def test_tenants_spread_across_cool_nodes_and_never_onto_hot_ones() -> None:
    state = state_with(*(manifests.node(f"n{i}", cpu="8") for i in range(5)))
    usage = {f"n{i}": NodeSample(0.2 + 0.05 * i, 0.2, NOW - 1) for i in range(4)}
    usage["n4"] = NodeSample(0.9, 0.2, NOW - 1)  # hot
    policy = spec_policy(spreadBy=[{"labelKey": "tenant"}])
    pods = [pod_info(f"{t}{i}", labels={"tenant": t}) for i in range(8) for t in "abc"]
    placed: dict[str, Counter[str]] = {t: Counter() for t in "abc"}
    rng = random.Random(2)
    for pod in pods:
        result = schedule_one(pod, state, Basis(policy, usage, NOW, rng))
        assert isinstance(result, Decision)
        state.assume(pod, result.node, at=NOW)
        placed[pod.labels["tenant"]][result.node] += 1
    for tenant, counts in placed.items():
        assert "n4" not in counts
        assert max(counts.values()) <= 8 / 4 + 1, (tenant, counts)
    without = state_with(*(manifests.node(f"n{i}", cpu="8") for i in range(5)))
    herd = place(
        without, [pod_info(f"x{i}", labels={"tenant": "a"}) for i in range(8)], spec_policy(), usage
    )
    assert max(herd.values()) > 3  # load alone puts a tenant's burst on the coolest nodes


def test_policy_status_names_a_dimension_the_operator_does_not_declare() -> None:
    from loadwise.reporting.policy_status import metrics_report
    from loadwise.usage.cache import MetricsCache
    from loadwise.usage.prometheus import PrometheusSource
    from loadwise.usage.prometheus_settings import PrometheusSettings

    settings = PrometheusSettings(url="http://x", dimensions={"gpu": "q"})
    cache = MetricsCache(PrometheusSource(settings), 10)
    cache.samples = {"n0": NodeSample(0.1, 0.1, NOW - 1)}
    gpu = spec_policy(dimensions=[{"name": "gpu"}])
    assert metrics_report(gpu, cache, ["n0"], NOW).available
    disk = spec_policy(dimensions=[{"name": "gpu"}, {"name": "disk"}])
    report = metrics_report(disk, cache, ["n0"], NOW)
    assert not report.available and report.fresh_nodes == 1
    assert report.message.startswith("dimension(s) disk not declared")


def test_a_pod_inside_the_rate_window_counts_for_what_the_window_does_not_show() -> None:
    """Sample at NOW - 1 covering placements up to NOW - 11 (a 10 s window): a pod placed 6 s
    before the sample is assumed 60% shown, so 40% of its estimate still counts; a pod placed
    after the sample counts in full."""
    state = state_with(manifests.node("a", cpu="4"))
    sample = {"a": NodeSample(0.1, 0.0, NOW - 1, NOW - 11)}
    state.assume(pod_info("old", cpu="1"), "a", at=NOW - 7)
    policy = spec_policy(weights={"cpu": 1, "memory": 0}, memoryEstimate=0)
    result = schedule_one(
        pod_info("new", cpu="0"), state, Basis(policy, sample, NOW, random.Random(1))
    )
    assert isinstance(result, Decision)
    assert result.chosen.cpu == pytest.approx(0.1 + 0.4 * 1.5 * 1000 / 4000)
    state.assume(pod_info("later", cpu="1"), "a", at=NOW - 0.5)
    result = schedule_one(
        pod_info("new", cpu="0"), state, Basis(policy, sample, NOW, random.Random(1))
    )
    assert isinstance(result, Decision)
    assert result.chosen.cpu == pytest.approx(0.1 + (0.4 + 1) * 1.5 * 1000 / 4000)
