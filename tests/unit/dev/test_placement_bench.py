"""bench/placement's pure parts: the water-fill optimum (one case checked by hand), scenarios as a
function of the seed alone (gpu: the burst's nodes and pods plus GPU nodes), the policy specs per
run, the packing and gpu_hot_pods figures, the table, and the exporter's cleared dimension."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from types import ModuleType

import pytest

from loadwise_dev.engines import placement
from loadwise_dev.engines.placement import PodPlan, water_fill
from loadwise_dev.exporter import UsageExporter

from ...helpers import load_bench


def test_water_fill_by_hand() -> None:
    # Three 10-core nodes at 10%, 30%, 90%; 4 cores to add. The coolest alone would reach
    # (4 + 1) / 10 = 50% > 30%, so the two coolest share: (4 + 1 + 3) / 20 = 40% <= 90%.
    after, level = water_fill({"a": 0.1, "b": 0.3, "c": 0.9}, dict.fromkeys("abc", 10.0), 4.0)
    assert level == pytest.approx(0.4)
    assert after == pytest.approx({"a": 0.4, "b": 0.4, "c": 0.9})
    # mean 17/30; deviations -1/6, -1/6, 1/3: variance (1/36 + 1/36 + 1/9) / 3 = 1/18.
    assert statistics.pstdev(after.values()) == pytest.approx((1 / 18) ** 0.5)  # 0.2357


def test_water_fill_edges() -> None:
    levels = {"a": 0.2, "b": 0.5}
    capacity = {"a": 8.0, "b": 8.0}
    assert water_fill(levels, capacity, 0.0) == ({"a": 0.2, "b": 0.5}, 0.2)
    # Enough to lift both: (8 * 0.2 + 8 * 0.5 + 3.2) / 16 = 55%.
    after, level = water_fill(levels, capacity, 3.2)
    assert level == pytest.approx(0.55) and after == pytest.approx({"a": 0.55, "b": 0.55})
    # More than the free capacity: every node full, the rest does not fit.
    assert water_fill(levels, capacity, 100.0) == ({"a": 1.0, "b": 1.0}, 1.0)
    # Unequal capacities: the big node takes more cores for the same level.
    after, level = water_fill({"a": 0.0, "b": 0.0}, {"a": 2.0, "b": 6.0}, 4.0)
    assert level == pytest.approx(0.5)
    assert water_fill({}, {}, 1.0) == ({}, 0.0)


def test_water_fill_is_never_beaten_by_a_random_placement() -> None:
    rng = random.Random(3)
    levels = {f"n{i}": rng.uniform(0.05, 0.95) for i in range(30)}
    pods = [rng.randint(20, 250) for _ in range(300)]
    best, _ = water_fill(levels, dict.fromkeys(levels, 8000.0), float(sum(pods)))
    assert sum(best.values()) * 8000 == pytest.approx(sum(levels.values()) * 8000 + sum(pods))
    for _ in range(20):
        after = dict(levels)
        for cpu in pods:
            node = rng.choice(list(after))
            after[node] += cpu / 8000
        assert statistics.pstdev(best.values()) <= statistics.pstdev(after.values())


def test_optimum_stddev_counts_the_burst_only() -> None:
    before = {"a": 0.1, "b": 0.3, "c": 0.9}
    burst = [PodPlan("p0", "2500m", "1Mi"), PodPlan("p1", "1500m", "1Mi")]
    assert placement.optimum_stddev(before, burst, 10000) == (0.2357, 0.4)


def test_burst_scenario_is_todays_sequence() -> None:
    """Same seed, same nodes and pods as before scenarios existed (backgrounds, then usages)."""
    before, scenario = placement.make_scenario("burst", 1, 10, 50)
    rng = random.Random(1)
    assert before == placement.backgrounds(rng, 10)
    assert [(p.cpu, p.memory) for p in scenario.burst] == placement.pod_usages(rng, 50)
    assert scenario.requests == placement.REQUESTS and not scenario.warmup
    assert [p.name for p in scenario.burst][:2] == ["b0000", "b0001"]


def test_workload_mix_is_a_function_of_the_seed() -> None:
    one = placement.make_scenario("workload-mix", 5, 20, 1000)
    assert one == placement.make_scenario("workload-mix", 5, 20, 1000)
    assert one != placement.make_scenario("workload-mix", 6, 20, 1000)
    _, mix = one
    kinds = Counter(mix.workloads.values())
    assert kinds == {"idle": 12, "hungry": 4}
    assert len(mix.warmup) == 3 * 16 and len(mix.warmup) + len(mix.burst) == 1000
    assert Counter(p.workload for p in mix.warmup) == dict.fromkeys(mix.workloads, 3)
    for pod in mix.warmup + mix.burst:
        assert pod.workload is not None
        cpu = placement.millis(pod.cpu)
        if mix.workloads[pod.workload] == "hungry":
            assert 540 <= cpu <= 660  # about three times the 200m request
        else:
            assert 30 <= cpu <= 50  # about a fifth
    # The burst interleaves the workloads rather than sending them one after the other.
    first = [p.workload for p in mix.burst[:40]]
    assert len(set(first)) > 8
    assert len({p.name for p in mix.warmup + mix.burst}) == 1000


def test_workload_mix_small() -> None:
    _, mix = placement.make_scenario("workload-mix", 1, 5, 20)  # 5 pods a workload: 2 history
    assert Counter(mix.workloads.values()) == {"idle": 3, "hungry": 1}
    assert len(mix.warmup) == 2 * 4 and len(mix.burst) == 12
    with pytest.raises(ValueError, match="unknown scenario"):
        placement.make_scenario("storm", 1, 5, 40)


def test_policy_specs_per_run() -> None:
    _, burst = placement.make_scenario("burst", 1, 2, 2)
    _, mix = placement.make_scenario("workload-mix", 1, 2, 40)
    assert placement.loadwise_spec("loadwise", "default", burst) == {}
    assert placement.loadwise_spec("loadwise", "cpu", burst) == {"weights": {"cpu": 1, "memory": 0}}
    assert placement.loadwise_spec("loadwise", "pack", burst) == {
        "strategy": "Pack",
        "targetUtilization": {"cpu": 70, "memory": 80},
    }
    assert placement.loadwise_spec("naive", "pack", burst) == placement.NAIVE_POLICY
    assert placement.loadwise_spec("kube-scheduler", "cpu", burst) is None
    assert placement.loadwise_spec("loadwise", "cpu", mix) == {
        "weights": {"cpu": 1, "memory": 0},
        "learnedEstimate": True,
    }
    assert placement.loadwise_spec("loadwise-requests", "default", mix) == {
        "learnedEstimate": False
    }
    assert placement.POLICY_SPECS["default"] == {}  # the specs are not mutated by the above


def test_summary_packing_figures_and_ratio_to_the_optimum() -> None:
    before = {"a": (0.1, 0.2), "b": (0.3, 0.2), "c": (0.9, 0.2)}
    after = {"a": (0.5, 0.3), "b": (0.3, 0.2), "c": (0.9, 0.2)}
    outcome = placement.summarise(before, after, Counter(a=4), 4, 0, 1.0, optimum=0.2357)
    assert (outcome.nodes_used, outcome.nodes_empty, outcome.max_pods_per_node) == (1, 2, 4)
    assert outcome.idle_left == 0  # b got nothing but is at 30%, not below
    assert outcome.cpu_util_stddev == round(statistics.pstdev([0.5, 0.3, 0.9]), 4)
    assert outcome.vs_optimum == round(outcome.cpu_util_stddev / 0.2357, 3)
    assert placement.summarise(before, after, Counter(), 0, 0, 1.0, optimum=0.0).vs_optimum is None


def _bench() -> ModuleType:
    return load_bench("placement")


def test_table_has_the_new_columns_and_the_optimum() -> None:
    before = {"a": (0.1, 0.2), "b": (0.3, 0.2)}
    after = {"a": (0.4, 0.3), "b": (0.3, 0.2)}
    results = {
        "loadwise": placement.summarise(before, after, Counter(a=3), 3, 0, 1.0, 0.05),
        "loadwise-requests": placement.summarise(before, after, Counter(a=3), 3, 0, 1.0, 0.0),
    }
    optimum = {"cpu_stddev": 0.05, "cpu_level": 0.35, "cpu_before": 0.1}
    data = placement.as_json(results, 2, 3, 1, "cpu", None, optimum)
    assert data["policy"] == "cpu" and data["optimum_cpu_stddev"] == 0.05
    text = _bench().table(data)  # type: ignore[attr-defined]
    header, ours, requests_only, footer = text.splitlines()
    for title in ("nodes used", "nodes empty", "vs optimum", "cpu sd", "new hot"):
        assert title in header
    assert ours.split()[-4:] == ["1", "1", "0", "1.00"]  # used, empty, idle left, ratio
    assert requests_only.startswith("loadwise-requests ") and requests_only.endswith(" -")
    assert footer == "optimum (water-fill): cpu sd 0.050, level 35%"


def test_gpu_scenario_is_the_burst_plus_gpu_nodes() -> None:
    before, burst = placement.make_scenario("burst", 4, 100, 300)
    gpu_before, gpu = placement.make_scenario("gpu", 4, 100, 300)
    assert gpu_before == before and gpu.burst == burst.burst and gpu.requests == burst.requests
    assert gpu.name == "gpu" and not burst.gpu and not gpu.warmup
    assert gpu == placement.make_scenario("gpu", 4, 100, 300)[1]
    assert gpu.gpu != placement.make_scenario("gpu", 5, 100, 300)[1].gpu
    assert set(gpu.gpu) <= set(before) and len(gpu.gpu) == 30
    busy = {n for n, v in gpu.gpu.items() if v > placement.GPU_HOT}
    assert len(busy) == 10 and all(0.92 <= gpu.gpu[n] <= 0.99 for n in busy)
    assert all(0.1 <= v <= 0.6 for n, v in gpu.gpu.items() if n not in busy)
    _, small = placement.make_scenario("gpu", 1, 10, 20)
    assert len(small.gpu) == 3 and sum(v > placement.GPU_HOT for v in small.gpu.values()) == 1


def test_gpu_policy_adds_the_dimension() -> None:
    _, gpu = placement.make_scenario("gpu", 1, 10, 20)
    dims = [{"name": "gpu", "weight": 1, "hotThreshold": 90}]
    assert placement.loadwise_spec("loadwise", "default", gpu) == {"dimensions": dims}
    assert placement.loadwise_spec("loadwise", "cpu", gpu) == {
        "weights": {"cpu": 1, "memory": 0},
        "dimensions": dims,
    }
    assert placement.loadwise_spec("naive", "default", gpu) == placement.NAIVE_POLICY
    assert placement.loadwise_spec("kube-scheduler", "default", gpu) is None
    assert "dimensions" not in placement.POLICY_SPECS["cpu"]
    data = placement.as_json({}, 10, 20, 1, "cpu", gpu)
    assert data["policy_spec"]["dimensions"] == dims and data["gpu_nodes"] == 3
    assert data["gpu_hot_nodes"] == 1 and data["gpu_hot_threshold"] == 0.9


def test_gpu_hot_pods_counts_pods_on_nodes_above_90_percent() -> None:
    gpu = {"busy": 0.95, "edge": 0.9, "calm": 0.3}
    placed = Counter(busy=4, edge=2, calm=5, cpu_only=7)
    assert placement.gpu_hot_pods(placed, gpu) == 4  # 90% itself is not above
    assert placement.gpu_hot_pods(placed, {}) == 0
    before = {n: (0.2, 0.2) for n in ("busy", "edge", "calm", "cpu_only")}
    after = {n: (0.3, 0.3) for n in before}
    outcome = placement.summarise(before, after, placed, 18, 0, 1.0, 0.1, gpu)
    assert outcome.gpu_hot_pods == 4
    assert outcome.per_node["busy"]["gpu"] == 0.95 and "gpu" not in outcome.per_node["cpu_only"]
    assert placement.summarise(before, after, placed, 18, 0, 1.0, 0.1).gpu_hot_pods == 0


def test_table_shows_gpu_hot_pods_in_the_gpu_scenario_only() -> None:
    _, gpu = placement.make_scenario("gpu", 1, 10, 20)
    before = {n: (0.2, 0.2) for n in gpu.gpu}
    busy = next(n for n, v in gpu.gpu.items() if v > placement.GPU_HOT)
    results = {
        "naive": placement.summarise(before, before, Counter({busy: 3}), 3, 0, 1.0, None, gpu.gpu)
    }
    bench = _bench()
    text = bench.table(placement.as_json(results, 10, 20, 1, "default", gpu))  # type: ignore[attr-defined]
    header, row, footer = text.splitlines()
    assert header.endswith("gpu hot pods") and row.split()[-1] == "3"
    assert footer == "gpu: 3 GPU nodes, 1 above 90%"
    _, burst = placement.make_scenario("burst", 1, 10, 20)
    plain = bench.table(placement.as_json(results, 10, 20, 1, "default", burst))  # type: ignore[attr-defined]
    assert "gpu" not in plain


def test_cleared_dimension_is_no_longer_published() -> None:
    exporter = UsageExporter()  # rendered directly, never served
    try:
        exporter.set_usage("n1", 0.1, 0.1)
        exporter.set_dimension("n1", "gpu", 0.95)
        assert 'DCGM_FI_DEV_GPU_UTIL{node="n1",gpu="0"} 95.000' in exporter.render()
        exporter.clear_dimension("n1", "gpu")
        exporter.clear_dimension("n1", "gpu")  # again, and unknown nodes: no error
        exporter.clear_dimension("gone", "gpu")
        assert "DCGM_FI_DEV_GPU_UTIL{" not in exporter.render()
    finally:
        exporter.stop()
