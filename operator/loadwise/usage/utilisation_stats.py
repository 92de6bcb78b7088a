"""How evenly loaded the nodes are, as the operator measures them: the outcome its placements
aim at, for the dashboard (loadwise_node_utilisation_ratio) rather than for decisions."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection

from .cache import NodeSample

STATS = ("min", "median", "p90", "max", "stddev")


def utilisation_stats(fresh: Collection[NodeSample]) -> dict[tuple[str, str], float]:
    """(resource, stat) -> value over the samples that count (framework/heat.py's rule, applied
    by the caller); empty when none does."""
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
