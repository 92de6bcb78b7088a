"""The dashboard's outcome figures: the spread of the nodes' measured utilisation."""

from __future__ import annotations

import pytest

from loadwise.usage.cache import NodeSample
from loadwise.usage.utilisation_stats import utilisation_stats


def test_stats_over_the_clusters_nodes_with_a_fresh_sample() -> None:
    now = 1000.0
    samples = {f"n{i}": NodeSample(i / 10, 0.5, now) for i in range(1, 11)}
    samples["stale"] = NodeSample(1.0, 1.0, now - 301)
    samples["elsewhere"] = NodeSample(1.0, 1.0, now)  # not a node of the cluster
    stats = utilisation_stats(samples, [*(f"n{i}" for i in range(1, 11)), "stale"], now, 300)
    assert stats[("cpu", "min")] == pytest.approx(0.1)
    assert stats[("cpu", "median")] == pytest.approx(0.55)
    assert stats[("cpu", "p90")] == pytest.approx(0.9)
    assert stats[("cpu", "max")] == pytest.approx(1.0)
    assert stats[("cpu", "stddev")] == pytest.approx(0.2872, abs=1e-4)
    assert stats[("memory", "stddev")] == 0.0
    assert utilisation_stats(samples, ["stale"], now, 300) == {}
