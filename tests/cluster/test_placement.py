"""The placement-quality scenario of bench/placement, small: loadwise against the naive scorer.

Asserts the qualitative outcome only (no timings): loadwise heats up no node that was below its
hot threshold, and spreads utilisation more evenly than the naive `100 - cpu%` scorer, which
herds the burst onto the node that looked idlest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadwise_dev.cluster import LocalCluster
from loadwise_dev.engines import placement

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def exporter_cluster() -> Iterator[LocalCluster]:
    """As `bench/placement --no-kwok` runs: API-object nodes, usage from the harness's exporter."""
    cluster = LocalCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_burst_keeps_nodes_out_of_the_hot_zone_without_herding(
    local_cluster: LocalCluster, clean: None
) -> None:
    """As bench/placement runs by default: KWOK nodes, usage from KWOK through Prometheus, read
    with kube-prometheus-stack's queries (the session cluster)."""
    _, results, _ = await placement.run_scenario(
        local_cluster, nodes=20, pods=200, seed=7, schedulers=("loadwise", "naive")
    )
    _check(results)


async def test_the_same_with_usage_from_the_exporter(exporter_cluster: LocalCluster) -> None:
    """API-object nodes, usage from the harness's exporter (node-exporter's series)."""
    _, results, _ = await placement.run_scenario(
        exporter_cluster, nodes=20, pods=200, seed=7, schedulers=("loadwise", "naive")
    )
    _check(results)


def _check(results: dict[str, placement.Outcome]) -> None:
    ours, naive = results["loadwise"], results["naive"]
    assert ours.unschedulable == 0 and naive.unschedulable == 0
    assert ours.new_hot_nodes == 0, ours
    assert ours.cpu_util_stddev < naive.cpu_util_stddev
    assert naive.max_pods_per_node >= 4 * naive.fair_share, naive  # herding
    assert ours.max_pods_per_node < naive.max_pods_per_node
