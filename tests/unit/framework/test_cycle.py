"""The scheduling algorithm on synthetic clusters: no API server involved."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, Unschedulable, failure_message, schedule_one
from loadwise.framework.scoring import normalize
from loadwise.policies.policy import Policy, parse_spec
from loadwise.resources import CPU, MEMORY, PODS
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

NOW = 1_000_000.0
RNG = random.Random(1)


def policy(cpu: float = 1, memory: float = 1) -> Policy:
    return Policy("p", parse_spec({"weights": {"cpu": cpu, "memory": memory}}))


def samples(**usage: tuple[float, float]) -> dict[str, NodeSample]:
    return {n: NodeSample(c, m, NOW - 1) for n, (c, m) in usage.items()}


def test_least_loaded_node_wins() -> None:
    state = state_with(manifests.node("hot"), manifests.node("cold"))
    result = schedule_one(
        pod_info(), state, Basis(policy(), samples(hot=(0.9, 0.5), cold=(0.1, 0.5)), NOW, RNG)
    )
    assert isinstance(result, Decision)
    assert result.node == "cold"
    assert result.score == 100


def test_weights_change_the_choice() -> None:
    state = state_with(manifests.node("cpu-busy"), manifests.node("mem-busy"))
    usage = samples(**{"cpu-busy": (0.7, 0.1), "mem-busy": (0.1, 0.7)})
    by_cpu = schedule_one(pod_info(), state, Basis(policy(cpu=10, memory=1), usage, NOW, RNG))
    by_mem = schedule_one(pod_info(), state, Basis(policy(cpu=1, memory=10), usage, NOW, RNG))
    assert isinstance(by_cpu, Decision) and by_cpu.node == "mem-busy"
    assert isinstance(by_mem, Decision) and by_mem.node == "cpu-busy"


def spec_policy(**spec: object) -> Policy:
    return Policy("p", parse_spec(spec))


def test_hot_nodes_get_nothing_while_a_cool_node_fits() -> None:
    state = state_with(manifests.node("hot"), manifests.node("warm"))
    usage = samples(hot=(0.85, 0.2), warm=(0.6, 0.95))
    by_cpu_only = spec_policy(
        weights={"cpu": 1, "memory": 0}, hotThresholds={"cpu": 80, "memory": 100}
    )
    result = schedule_one(pod_info(), state, Basis(by_cpu_only, usage, NOW, RNG))
    assert isinstance(result, Decision)
    assert (result.node, result.hot_skipped, result.all_hot) == ("warm", 1, False)


def test_when_every_node_is_hot_the_least_loaded_is_used() -> None:
    """Never pending on load alone: cluster-autoscaler would not act on such a pod."""
    state = state_with(manifests.node("a"), manifests.node("b"))
    # b carries more requests than a: a request-based pick would be a, the wrong answer.
    state.assume(pod_info(cpu="2"), "b", at=NOW - 3600)
    usage = samples(a=(0.95, 0.5), b=(0.85, 0.5))
    for seed in range(20):  # not by a lucky tie-break
        result = schedule_one(pod_info(), state, Basis(policy(), usage, NOW, random.Random(seed)))
        assert isinstance(result, Decision)
        assert (result.node, result.all_hot) == ("b", True)


def test_hot_means_after_the_estimate_of_recent_placements() -> None:
    state = state_with(manifests.node("a", cpu="4"), manifests.node("b", cpu="4"))
    state.assume(pod_info(cpu="1"), "a")  # +25% since the sample: 0.6 -> 0.85, hot
    result = schedule_one(
        pod_info(cpu="10m"),
        state,
        Basis(policy(memory=0), samples(a=(0.6, 0.0), b=(0.7, 0.0)), NOW, RNG),
    )
    assert isinstance(result, Decision) and result.node == "b" and result.hot_skipped == 1


def test_load_share_zero_ignores_metrics() -> None:
    state = state_with(manifests.node("a"), manifests.node("b"))
    state.assume(pod_info(cpu="2"), "a")
    result = schedule_one(
        pod_info(),
        state,
        Basis(spec_policy(loadShare=0), samples(a=(0.0, 0.0), b=(0.7, 0.7)), NOW, RNG),
    )
    assert isinstance(result, Decision) and result.node == "b"
    assert result.chosen.source == "requests"


def test_naive_policy_herds() -> None:
    """The articles' scorer (100 - cpu%, no estimate, no thresholds) sends a whole burst to the
    node that looked idlest; the default policy spreads it."""
    naive = spec_policy(
        weights={"cpu": 1, "memory": 0},
        loadShare=100,
        placementEstimate=0,
        hotThresholds={"cpu": 100, "memory": 100},
    )
    for chosen_policy, expect_herd in ((naive, True), (policy(), False)):
        state = state_with(*(manifests.node(f"n{i}", cpu="8") for i in range(4)))
        usage = samples(n0=(0.10, 0.1), n1=(0.15, 0.1), n2=(0.2, 0.1), n3=(0.25, 0.1))
        rng = random.Random(3)
        for i in range(20):
            pod = pod_info(f"b{i}", cpu="500m")
            result = schedule_one(pod, state, Basis(chosen_policy, usage, NOW, rng))
            assert isinstance(result, Decision)
            state.assume(pod, result.node)
        busiest = max(state.requested(f"n{i}").get("pods", 0) for i in range(4))
        assert (busiest == 16) is expect_herd  # 16 = all that fit on one 8-cpu node


def test_pods_inside_the_rate_window_are_still_estimated() -> None:
    """A sample taken 1 s ago that covers placements only up to 10 s ago (rate window): a pod
    placed 5 s ago is not (fully) in it, so it still counts against its node."""
    state = state_with(manifests.node("a", cpu="4"), manifests.node("b", cpu="4"))
    state.assume(pod_info(cpu="1"), "a", at=NOW - 5)
    windowed = {n: NodeSample(0.1 if n == "a" else 0.2, 0.0, NOW - 1, NOW - 10) for n in "ab"}
    result = schedule_one(pod_info(cpu="10m"), state, Basis(policy(memory=0), windowed, NOW, RNG))
    assert isinstance(result, Decision) and result.node == "b"
    covered = {n: NodeSample(s.cpu, 0.0, NOW - 1, NOW - 2) for n, s in windowed.items()}
    result = schedule_one(pod_info(cpu="10m"), state, Basis(policy(memory=0), covered, NOW, RNG))
    assert isinstance(result, Decision) and result.node == "a"


def test_stale_metrics_fall_back_to_requests() -> None:
    state = state_with(manifests.node("a"), manifests.node("b"))
    state.assume(pod_info(cpu="3", memory="1Gi"), "a")
    stale = {n: NodeSample(0.0 if n == "a" else 0.9, 0.0, NOW - 3600) for n in ("a", "b")}
    result = schedule_one(pod_info(), state, Basis(policy(), stale, NOW, RNG))
    assert isinstance(result, Decision)
    assert result.node == "b"  # a's stale sample says idle, but its requests say busy
    assert result.chosen.source == "requests"


def test_pods_placed_since_the_sample_count_against_the_node() -> None:
    state = state_with(manifests.node("a", cpu="4"), manifests.node("b", cpu="4"))
    usage = samples(a=(0.10, 0.0), b=(0.20, 0.0))
    state.assume(pod_info(cpu="1"), "a")  # after the sample: +25% on a
    result = schedule_one(pod_info(cpu="10m"), state, Basis(policy(memory=0), usage, NOW, RNG))
    assert isinstance(result, Decision) and result.node == "b"


def test_filters_and_kube_scheduler_style_message() -> None:
    state = state_with(
        manifests.node("small", cpu="1"),
        manifests.node("cordoned", unschedulable=True),
        manifests.node("down", ready=False),
        manifests.node("full", pods=0),
    )
    result = schedule_one(pod_info(cpu="2"), state, Basis(policy(), {}, NOW, RNG))
    assert isinstance(result, Unschedulable)
    assert result.message == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 Too many pods, "
        "1 node(s) were not ready, 1 node(s) were unschedulable."
    )


def test_no_nodes() -> None:
    result = schedule_one(pod_info(), state_with(), Basis(policy(), {}, NOW, RNG))
    assert isinstance(result, Unschedulable)
    assert result.message == failure_message(0, {})


def test_node_with_garbage_allocatable_is_skipped_not_fatal() -> None:
    bad = manifests.node("bad")
    bad["status"]["allocatable"]["cpu"] = "lots"
    state = state_with(bad, manifests.node("good"))
    result = schedule_one(pod_info(), state, Basis(policy(), {}, NOW, RNG))
    assert isinstance(result, Decision) and result.node == "good"


def test_pod_with_garbage_requests_is_unschedulable_with_reason() -> None:
    pod = pod_info(cpu="a lot")
    result = schedule_one(pod, state_with(manifests.node("n")), Basis(policy(), {}, NOW, RNG))
    assert isinstance(result, Unschedulable)
    assert "invalid resource requests" in result.message


def test_normalize_scales_best_to_100() -> None:
    assert normalize([50.0, 25.0, 0.0]) == [100.0, 50.0, 0.0]
    assert normalize([0.0, 0.0]) == [0.0, 0.0]


@settings(max_examples=60, deadline=None)
@given(
    capacities=st.lists(st.integers(min_value=0, max_value=4000), min_size=1, max_size=6),
    requests=st.lists(st.integers(min_value=1, max_value=1500), min_size=1, max_size=40),
    usage=st.lists(st.floats(min_value=0, max_value=1), min_size=6, max_size=6),
)
def test_reserve_never_overcommits(
    capacities: list[int], requests: list[int], usage: list[float]
) -> None:
    """Schedule a burst with every decision assumed at once (binds still in flight): no node's
    requests ever exceed its allocatable, whatever the metrics say."""
    nodes = [manifests.node(f"n{i}", cpu=f"{c}m", memory="1Gi") for i, c in enumerate(capacities)]
    state = state_with(*nodes)
    metrics = samples(**{f"n{i}": (usage[i], usage[i]) for i in range(len(capacities))})
    rng = random.Random(0)
    for i, cpu in enumerate(requests):
        pod = pod_info(f"p{i}", cpu=f"{cpu}m", memory="1Mi")
        result = schedule_one(pod, state, Basis(policy(), metrics, NOW, rng))
        if isinstance(result, Decision):
            state.assume(pod, result.node)
    for node in state.nodes.values():
        requested = state.requested(node.name)
        assert requested.get(CPU, 0) <= node.allocatable[CPU]
        assert requested.get(MEMORY, 0) <= node.allocatable[MEMORY]
        assert requested.get(PODS, 0) <= node.allocatable[PODS]
