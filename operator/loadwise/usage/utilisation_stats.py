"""How evenly loaded the nodes are, as the operator measures them: the outcome its placements
aim at, for the dashboard (loadwise_node_utilisation_ratio) rather than for decisions."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping

from .cache import NodeSample

STATS = ("min", "median", "p90", "max", "stddev")


def utilisation_stats(
    samples: Mapping[str, NodeSample], nodes: Collection[str], now: float, max_age: float
) -> dict[tuple[str, str], float]:
    """(resource, stat) -> value over the cluster's nodes with a sample younger than
    `max_age`; empty when none has."""
    fresh = [
        sample
        for name in nodes
        if (sample := samples.get(name)) is not None and now - sample.timestamp <= max_age
    ]
    if not fresh:
        return {}
    out: dict[tuple[str, str], float] = {}
    for resource in ("cpu", "memory"):
        values = sorted(getattr(sample, resource) for sample in fresh)
        p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
        out.update(
            {
                (resource, "min"): values[0],
                (resource, "median"): statistics.median(values),
                (resource, "p90"): p90,
                (resource, "max"): values[-1],
                (resource, "stddev"): statistics.pstdev(values),
            }
        )
    return out
