"""The placement-quality scenario of bench/placement, small: loadwise against the naive scorer.

Asserts the qualitative outcome only (no timings): loadwise heats up no node that was below its
hot threshold, and spreads utilisation more evenly than the naive `100 - cpu%` scorer, which
herds the burst onto the node that looked idlest."""

from __future__ import annotations

import pytest

from loadwise_dev import placement
from loadwise_dev.cluster import LocalCluster

pytestmark = pytest.mark.cluster


async def test_burst_keeps_nodes_out_of_the_hot_zone_without_herding(
    local_cluster: LocalCluster, clean: None
) -> None:
    _, results, _ = await placement.run_scenario(
        local_cluster, nodes=20, pods=200, seed=7, schedulers=("loadwise", "naive")
    )
    ours, naive = results["loadwise"], results["naive"]
    assert ours.unschedulable == 0 and naive.unschedulable == 0
    assert ours.new_hot_nodes == 0, ours
    assert ours.cpu_util_stddev < naive.cpu_util_stddev
    assert naive.max_pods_per_node >= 4 * naive.fair_share, naive  # herding
    assert ours.max_pods_per_node < naive.max_pods_per_node
