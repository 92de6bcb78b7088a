"""The dashboard's outcome figures: the spread of the nodes' measured utilisation."""

from __future__ import annotations

import pytest

from loadwise.framework.heat import fresh_samples
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise.usage.cache import NodeSample
from loadwise.usage.utilisation_stats import utilisation_stats


def test_stats_over_the_clusters_nodes_whose_sample_counts_by_the_rule_placement_applies() -> None:
    now = 1000.0
    max_age = DEFAULT_POLICY.spec.metrics.max_age_seconds
    samples = {f"n{i}": NodeSample(i / 10, 0.5, now) for i in range(1, 11)}
    samples["stale"] = NodeSample(1.0, 1.0, now - max_age - 1)
    samples["just"] = NodeSample(0.1, 0.5, now - max_age)  # still counts
    samples["elsewhere"] = NodeSample(1.0, 1.0, now)  # not a node of the cluster
    nodes = [*(f"n{i}" for i in range(1, 11)), "stale", "just", "gone"]
    fresh = fresh_samples(samples, nodes, DEFAULT_POLICY, now)
    assert sorted(fresh) == sorted([*(f"n{i}" for i in range(1, 11)), "just"])
    del fresh["just"]
    stats = utilisation_stats(fresh.values())
    assert stats[("cpu", "min")] == pytest.approx(0.1)
    assert stats[("cpu", "median")] == pytest.approx(0.55)
    assert stats[("cpu", "p90")] == pytest.approx(0.9)
    assert stats[("cpu", "max")] == pytest.approx(1.0)
    assert stats[("cpu", "stddev")] == pytest.approx(0.2872, abs=1e-4)
    assert stats[("memory", "stddev")] == 0.0
    assert utilisation_stats(fresh_samples(samples, ["stale"], DEFAULT_POLICY, now).values()) == {}
