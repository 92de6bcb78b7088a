"""What a decision leaves behind: the short why of the Scheduled event, and the per-policy
placement metrics (by metrics or by requests, the estimate, hot nodes passed over)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import observability as obs
from ..framework.cycle import Decision
from ..usage.cache import NodeSample


def decision_record(decision: Decision) -> str:
    """The short why that goes into the Scheduled event."""
    chosen = decision.chosen
    load = _load(chosen.cpu, chosen.memory, chosen.sample_age)
    text = f"score {decision.score:.0f} ({load})"
    runner = decision.runner_up
    if runner is not None:
        text += f"; runner-up {runner[1].node} score {runner[0]:.0f}"
    if decision.hot_skipped:
        text += f"; {decision.hot_skipped} hot node(s) passed over"
    if decision.all_hot:
        text += "; every feasible node is hot: least loaded chosen"
    return f"{text}; policy {decision.policy}"


def _load(cpu: float, mem: float, age: float | None) -> str:
    where = f"metrics {age:.0f}s old" if age is not None else "requests"
    return f"cpu {cpu:.0%} mem {mem:.0%} by {where}"


class _PolicyMetrics:
    """One policy's labelled metrics, resolved once (a labels() lookup per pod adds up), and
    created at 0 so rate() and dashboards see the series before the first event."""

    __slots__ = ("all_hot", "by_metrics", "by_requests", "estimate", "hot")

    def __init__(self, policy: str) -> None:
        self.by_metrics = obs.PLACEMENTS.labels(policy, "metrics")
        self.by_requests = obs.PLACEMENTS.labels(policy, "requests")
        self.hot = obs.HOT_PASSED_OVER.labels(policy)
        self.all_hot = obs.ALL_HOT.labels(policy)
        self.estimate = obs.ESTIMATE_CPU.labels(policy)


class DecisionMetrics:
    """The placement metrics, per policy, resolved on first use."""

    def __init__(self) -> None:
        self._by_policy: dict[str, _PolicyMetrics] = {}

    def observe(self, decision: Decision, samples: Mapping[str, NodeSample]) -> None:
        metrics = self._by_policy.get(decision.policy)
        if metrics is None:
            metrics = self._by_policy[decision.policy] = _PolicyMetrics(decision.policy)
        chosen = decision.chosen
        sample = samples.get(chosen.node)
        if chosen.source == "metrics" and sample is not None:
            metrics.by_metrics.inc()
            metrics.estimate.observe(max(0.0, chosen.cpu - sample.cpu))
        else:
            metrics.by_requests.inc()
        if decision.hot_skipped:
            metrics.hot.inc(decision.hot_skipped)
        if decision.all_hot:
            metrics.all_hot.inc()
