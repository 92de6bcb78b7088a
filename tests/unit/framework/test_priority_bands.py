"""Hot thresholds by priority band (spec.priorityBands): a production pod judged by its band's
thresholds and, with usage BandAndAbove, by what pods of its priority or higher use (batch use
reclaimable); placement, the score index, rebalancing's rule and the status alike, with bad
bands refused by name."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

import pytest

from loadwise.framework import heat
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.index import ScoreIndex
from loadwise.framework.rebalance import Candidate
from loadwise.framework.types import PodInfo, parse_node
from loadwise.policies.policy import Policy, parse_spec
from loadwise.policies.priority_bands import band_of
from loadwise.scheduler.rebalancing.rebalancer import hot_for_their_bands
from loadwise.scheduler.usage_sources import UsageSources
from loadwise.usage.cache import MetricsCache, NodeSample
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

PRODUCTION = {"name": "production", "minPriority": 1000, "hotThresholds": {"cpu": 70}}
RECLAIMING = {**PRODUCTION, "usage": "BandAndAbove"}


def policy(**spec: Any) -> Policy:
    return Policy("p", parse_spec(spec))


def prio(pod: PodInfo, priority: int) -> PodInfo:
    return replace(pod, priority=priority)


def test_a_pod_is_in_the_band_of_the_highest_start_at_or_below_its_priority() -> None:
    bands = policy(priorityBands=[
        {"name": "batch", "minPriority": -10}, {"name": "prod", "minPriority": 1000},
        {"name": "system", "minPriority": 2000000000},
    ]).spec.priority_bands  # fmt: skip
    found = {p: (b.name if (b := band_of(bands, p)) else None) for p in (-11, -10, 999, 1000)}
    assert found == {-11: None, -10: "batch", 999: "batch", 1000: "prod"}
    assert band_of(bands, 2000001000) is not None and band_of(bands, 2000001000).name == "system"


def test_a_bands_thresholds_replace_the_nodes_for_its_pods_each_one_given() -> None:
    p = policy(
        pools=[{"name": "spot", "nodeSelector": {"matchLabels": {"pool": "spot"}},
                "hotThresholds": {"cpu": 50, "memory": 60}}],
        priorityBands=[PRODUCTION, {"name": "batch", "minPriority": 0}],
    )  # fmt: skip
    spot = parse_node(manifests.node("s", labels={"pool": "spot"}))
    production, batch = p.spec.priority_bands
    over_pool = "band production over pool spot"
    assert heat.thresholds_for(p, spot, production) == (70, 60, [], over_pool)
    assert heat.thresholds_for(p, spot, batch) == (50, 60, [], "pool spot")  # gives none
    assert heat.thresholds_for(p, None, production) == (70, 90, [], "band production")
    assert heat.thresholds_text(p, spot, production) == (
        "cpu 70%, memory 60% (band production over pool spot)"
    )


@pytest.mark.parametrize(
    ("bands", "message"),
    [
        ([PRODUCTION, PRODUCTION], "priority band 'production' is listed twice"),
        (
            [PRODUCTION, {"name": "other", "minPriority": 1000}],
            "priority band minPriority '1000' is listed twice",
        ),
        (
            [{"name": "g", "minPriority": 1, "hotThresholds": {"dimensions": {"gpu": 50}}}],
            "priority band g: hotThresholds.dimensions names 'gpu', which spec.dimensions does not",
        ),
        ([{"name": "x", "minPriority": 1, "usage": "Mine"}], "spec.priorityBands.0.usage"),
        ([{"name": "x", "minPriority": 2**31}], "spec.priorityBands.0.minPriority"),
        ([{"name": "X", "minPriority": 1}], "spec.priorityBands.0.name"),
    ],
)
def test_bad_bands_are_refused_naming_the_field(bands: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_spec({"priorityBands": bands})


def _world() -> tuple[Any, UsageSources, float]:
    """Two 4-core nodes, both measured: `batchy` at 85% CPU, of which production pods use 20%
    (batch the rest); `busy` at 75%, all of it production's."""
    now = time.time()
    state = state_with(manifests.node("batchy"), manifests.node("busy"))
    placed = {
        ("batchy", "prod-a", 1000, 800), ("batchy", "batch-a", 0, 2600),
        ("busy", "prod-b", 1000, 3000),
    }  # fmt: skip
    cache = MetricsCache(None, 10)
    cache.samples = {"batchy": NodeSample(0.85, 0.2, now), "busy": NodeSample(0.75, 0.2, now)}
    for node, name, priority, cpu in placed:
        pod = replace(prio(pod_info(name, cpu="10m", node=node), priority), placed_at=now - 600)
        state.observe_bound(pod, False)
        cache.pod_usage[(pod.namespace, name)] = (cpu, 0)
    cache.refreshes = 1
    return state, UsageSources({"prometheus": cache}, state), now


def test_production_is_judged_by_production_use_and_batch_by_the_whole_node() -> None:
    state, usage, now = _world()
    p = policy(priorityBands=[RECLAIMING])
    production = prio(pod_info("new-prod", cpu="10m"), 1000)
    batch = pod_info("new-batch", cpu="10m")
    for decide in (schedule_one, ScoreIndex().schedule):  # the index: one shape per band
        rng = random.Random(1)
        prod_at = decide(production, state, usage.basis(p, now, rng, production.priority))
        batch_at = decide(batch, state, usage.basis(p, now, rng, batch.priority))
        assert isinstance(prod_at, Decision) and isinstance(batch_at, Decision)
        # production: batchy is 20% production (cool), busy 75% (over its band's 70%)
        # batch: batchy is 85% (over 80%), busy 75% (cool)
        assert (prod_at.node, batch_at.node) == ("batchy", "busy")
    # All (the default): the band's threshold over the node's whole use; both hot for it
    whole = policy(priorityBands=[PRODUCTION])
    decided = schedule_one(production, state, usage.basis(whole, now, random.Random(1), 1000))
    assert isinstance(decided, Decision) and decided.all_hot


def test_without_per_pod_usage_a_band_is_judged_by_the_whole_node() -> None:
    _, usage, now = _world()
    usage.caches["prometheus"].pod_usage.clear()
    p = policy(priorityBands=[RECLAIMING])
    basis = usage.basis(p, now, random.Random(1), 1000)
    assert basis.samples is usage.samples_for(p) and basis.band is not None


def test_rebalancing_moves_a_pod_only_off_a_node_hot_for_its_band() -> None:
    state, usage, _ = _world()
    p = policy(priorityBands=[RECLAIMING])
    production = p.spec.priority_bands[0]
    sample = usage.caches["prometheus"].samples["batchy"]
    shares = [(1000, 0.2, 0.0), (0, 0.65, 0.0)]
    node = state.nodes["batchy"]
    assert heat.hot_for(p, sample, node, None, shares) == {"cpu": pytest.approx(0.05)}
    assert heat.hot_for(p, sample, node, production, shares) == {}  # placement allows it
    assert heat.hot_for(p, sample, node, production, None) == {"cpu": pytest.approx(0.15)}


def test_the_status_names_a_band_no_placed_pod_is_in() -> None:
    p = policy(priorityBands=[PRODUCTION, {"name": "system", "minPriority": 2000000000}])
    assert heat.thresholds_problems(p, {}, [0, 1000, 1500]) == [
        "priority band system has no placed pod"
    ]


def test_the_rebalancer_keeps_a_pod_whose_band_finds_the_node_cool() -> None:
    """A production pod on the batch-heavy node stays (its band's use is 20%); the batch pod
    may move; the plan says which it kept and why."""
    state, usage, _ = _world()
    p = policy(priorityBands=[RECLAIMING])
    sample = usage.caches["prometheus"].samples["batchy"]
    prod = Candidate(prio(pod_info("prod-a", node="batchy"), 1000), "Burstable", 0.2, 0.0)
    batch = Candidate(pod_info("batch-a", node="batchy"), "Burstable", 0.65, 0.0)
    shares = [(1000, 0.2, 0.0), (0, 0.65, 0.0)]
    node = state.nodes["batchy"]
    kept = hot_for_their_bands(p, node, sample, [prod, batch], shares)
    assert kept == ([batch], "not hot for their priority band: default/prod-a")
    assert hot_for_their_bands(policy(), node, sample, [prod, batch], shares) == (
        [prod, batch],
        "",
    )
