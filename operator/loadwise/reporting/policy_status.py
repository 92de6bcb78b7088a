"""SchedulingPolicy status: conditions and figures, computed without I/O.

Two writers share `status.conditions` (the change handler owns Ready, the metrics timer owns
MetricsAvailable), so each replaces only its own condition and keeps the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..framework import heat
from ..framework.types import NodeInfo
from ..kube.times import stamp
from ..policies.policy import Policy
from ..usage.cache import MetricsCache, NodeSample


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None, new: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Replace the condition of new["type"], keeping lastTransitionTime if status is unchanged."""
    out: list[dict[str, Any]] = []
    previous: Mapping[str, Any] = {}
    for condition in conditions or ():
        if condition.get("type") == new["type"]:
            previous = condition
        else:
            out.append(dict(condition))
    same = previous.get("status") == new["status"]
    changed_at = previous.get("lastTransitionTime", "") if same else stamp()
    out.append({**new, "lastTransitionTime": changed_at or stamp()})
    return sorted(out, key=lambda c: str(c["type"]))


@dataclass(frozen=True)
class MetricsReport:
    available: bool
    message: str
    fresh_nodes: int


def metrics_report(
    policy: Policy, cache: MetricsCache | None, nodes: Iterable[str], now: float
) -> MetricsReport:
    source = policy.spec.metrics.source
    if cache is None or cache.source is None:
        return MetricsReport(
            False, f"metrics source {source} is not enabled in the operator: scoring by requests", 0
        )
    max_age = policy.spec.metrics.max_age_seconds
    samples = cache.samples
    fresh = len(heat.fresh_samples(samples, nodes, policy, now))
    declared = cache.source.dimensions
    missing = [d.name for d in policy.spec.dimensions if d.name not in declared]
    if missing:
        measured = ", ".join(sorted(declared)) or "none beyond cpu and memory"
        return MetricsReport(
            False,
            f"dimension(s) {', '.join(missing)} not declared by the operator's {source} source "
            f"(it declares {measured}; Prometheus's are set by LOADWISE_PROMETHEUS_DIMENSIONS): "
            "they count as 0 on every node",
            fresh,
        )
    if cache.last_error is not None:
        return MetricsReport(
            False,
            f"{source} refresh failed ({cache.last_error}); {fresh} node(s) still have fresh "
            "samples, the others are scored by requests",
            fresh,
        )
    if fresh == 0:
        return MetricsReport(
            False, f"no node has a {source} sample younger than {max_age}s: scoring by requests", 0
        )
    return MetricsReport(
        True, f"{fresh} node(s) with {source} samples younger than {max_age}s", fresh
    )


def hot_nodes(
    policy: Policy, samples: Mapping[str, NodeSample], nodes: Mapping[str, NodeInfo], now: float
) -> int:
    """How many nodes are over one of the policy's hot thresholds (loadwise_policy_hot_nodes)."""
    return len(heat.hot_nodes(policy, samples, nodes, now))


def status_fields(
    report: MetricsReport,
    conditions: Sequence[Mapping[str, Any]] | None,
    last_refresh: float | None,
) -> dict[str, Any]:
    condition = {
        "type": "MetricsAvailable",
        "status": "True" if report.available else "False",
        "reason": "Fresh" if report.available else "Degraded",
        "message": report.message,
    }
    return {
        "conditions": set_condition(conditions, condition),
        "nodesWithFreshMetrics": report.fresh_nodes,
        "lastMetricsRefresh": stamp(last_refresh) if last_refresh else "",
    }
