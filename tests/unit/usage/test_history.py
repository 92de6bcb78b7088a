"""Peak-aware load (spec.metrics.aggregation): a node judged by an aggregate of its samples over
a window, from the cache's own history, so a node that idles between bursts is not taken for a
cool one."""

from __future__ import annotations

import random

import pytest

from loadwise.framework.cycle import Decision, schedule_one
from loadwise.policies.policy import Policy, parse_spec
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import MetricsCache, NodeSample
from loadwise.usage.history import SampleHistory, aggregate
from loadwise_dev import manifests

from ...fakes import FakeTransport
from ...helpers import pod_info

T0 = 1_000_000.0


def bursts(node: str, period: int = 6, seconds: int = 600, step: int = 10) -> list[NodeSample]:
    """A node busy (90% CPU) one sample in `period`, idle (10%) otherwise, its latest idle."""
    count = seconds // step
    return [
        NodeSample(0.9 if (count - 1 - i) % period == period // 2 else 0.1, 0.2, T0 + i * step)
        for i in range(count)
    ]


def test_aggregates_over_the_window_and_fall_back_to_what_there_is() -> None:
    history = SampleHistory(step=10)
    history.keep = 600
    points = bursts("a")
    for sample in points[:3]:  # a cold start: 20 s of history
        history.record({"a": sample})
    early = history.aggregated("max", 300, {"a": points[2]})
    assert early["a"].cpu == pytest.approx(max(p.cpu for p in points[:3]))
    for sample in points[3:]:
        history.record({"a": sample})
    latest = {"a": points[-1]}
    assert latest["a"].cpu == pytest.approx(0.1)  # idle right now
    peak = history.aggregated("max", 300, latest)["a"]
    assert peak.cpu == pytest.approx(0.9) and peak.memory == pytest.approx(0.2)
    assert peak.timestamp == points[-1].timestamp  # freshness is the latest sample's
    in_window = [p.cpu for p in points if p.timestamp >= points[-1].timestamp - 300]
    average = history.aggregated("avg", 300, latest)["a"].cpu
    assert average == pytest.approx(sum(in_window) / len(in_window))
    assert history.aggregated("latest", 300, latest) is latest
    # The same mapping until the next record: the score index keys its heaps on it.
    assert history.aggregated("max", 300, latest) is history.aggregated("max", 300, latest)
    assert history.span("a") <= 600


def test_points_are_one_per_step_and_nothing_is_kept_unless_a_window_asks() -> None:
    history = SampleHistory(step=10)
    history.record({"a": NodeSample(0.5, 0.5, T0)})
    assert history.span("a") == 0 and not history.aggregated("max", 60, {})
    history.keep = 60
    for i in range(30):  # a sample a second: one point per 10 s is kept
        history.record({"a": NodeSample(0.5, 0.5, T0 + i)})
    assert history.span("a") == pytest.approx(20)
    history.record({"b": NodeSample(0.5, 0.5, T0 + 40)})  # a gone from the source
    assert history.span("a") == 0


def test_percentiles_interpolate_as_quantile_over_time() -> None:
    values = [float(v) for v in range(11)]
    assert aggregate("p90", values) == pytest.approx(9.0)
    assert aggregate("p95", values) == pytest.approx(9.5)
    assert aggregate("max", values) == 10.0 and aggregate("avg", values) == 5.0


def scheduler_with(cache: MetricsCache) -> Scheduler:
    scheduler = Scheduler(
        "loadwise-scheduler",
        Binder(FakeTransport(lambda *_: (201, {})), "loadwise-scheduler"),
        {"prometheus": cache},
        SchedulingQueue(),
    )
    for name in ("bursty", "steady"):
        scheduler.on_node_event("ADDED", manifests.node(name))
    return scheduler


@pytest.mark.parametrize("how", ["max", "p95"])
def test_a_node_that_idles_between_bursts_is_judged_by_its_peaks(how: str) -> None:
    """By its latest sample the bursty node (10% now, 90% in its bursts) is the coolest and
    takes the pod; judged by its peaks it is hot, and the steady node at 40% takes it."""
    cache = MetricsCache(None, 10.0)
    scheduler = scheduler_with(cache)
    scheduler.policies.apply("latest", {})
    peaks = scheduler.policies.apply(
        "peaks", {"metrics": {"aggregation": how, "windowSeconds": 600}}
    )
    assert cache.history.keep == 600
    steady = [NodeSample(0.4, 0.2, s.timestamp) for s in bursts("steady")]
    for bursty_sample, steady_sample in zip(bursts("bursty"), steady, strict=True):
        cache.samples = {"bursty": bursty_sample, "steady": steady_sample}
        cache.history.record(cache.samples)
    now = steady[-1].timestamp + 1
    chosen = {}
    for policy in scheduler.policies.policies():
        basis = scheduler.usage.basis(policy, now, random.Random(0))
        decision = schedule_one(pod_info("p"), scheduler.state, basis)
        assert isinstance(decision, Decision)
        chosen[policy.name] = (decision.node, decision.hot_skipped)
    assert chosen["latest"] == ("bursty", 0)
    assert chosen["peaks"] == ("steady", 1)  # the bursty node is hot by its peaks
    scheduler.policies.remove(peaks.name)
    assert cache.history.keep == 0


def test_the_window_is_checked_by_the_model() -> None:
    with pytest.raises(ValueError, match="windowSeconds"):
        parse_spec({"metrics": {"aggregation": "max", "windowSeconds": 30}})
    with pytest.raises(ValueError, match="aggregation"):
        parse_spec({"metrics": {"aggregation": "median"}})
    assert Policy("p", parse_spec({})).spec.metrics.aggregation == "latest"


def test_a_backfill_adds_only_older_points_a_step_apart_within_the_window() -> None:
    history = SampleHistory(step=10)
    history.keep = 300
    points = bursts("a")  # 600 s of samples, one every 10 s
    history.record({"a": points[-1]})  # a replica that just started: one point
    latest = {"a": points[-1]}
    before = history.aggregated("max", 300, latest)
    assert before["a"].cpu == pytest.approx(0.1)  # idle now: a one-point window misses bursts
    past = [{"a": p, "gone": p} for p in points[:-1]]  # "gone": no history here: ignored
    added = history.backfill(past)
    assert added == 30 and history.span("a") == 300  # within keep of the latest point
    after = history.aggregated("max", 300, latest)
    assert after is not before and after["a"].cpu == pytest.approx(0.9)
    assert history.backfill(past) == 0  # nothing older than what it holds now
    assert history.aggregated("max", 300, latest) is after
