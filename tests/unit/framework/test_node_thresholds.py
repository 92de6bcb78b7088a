"""Hot thresholds by pool and by node (spec.pools, the annotation loadwise.io/hot-thresholds):
one rule in framework/heat.py for placement, rebalancing and the status, with bad input refused
by name and never a crash."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loadwise.framework import heat
from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.node_thresholds import parse_node_thresholds
from loadwise.framework.types import parse_node
from loadwise.policies.policy import Policy, parse_spec
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import pod_info, state_with

NOW = 1_000_000.0
SPOT = {"matchLabels": {"pool": "spot"}}


def policy(**spec: Any) -> Policy:
    return Policy("p", parse_spec(spec))


def node(name: str, labels: dict[str, str] | None = None, note: str | None = None) -> Any:
    raw = manifests.node(name, labels=labels)
    if note is not None:
        raw["metadata"]["annotations"] = {"loadwise.io/hot-thresholds": note}
    return raw


@pytest.mark.parametrize(
    ("value", "found", "error"),
    [
        ("cpu=70,memory=85", {"cpu": 70.0, "memory": 85.0}, ""),
        (" gpu = 90 ", {"gpu": 90.0}, ""),
        ("cpu=abc", {}, 'loadwise.io/hot-thresholds "cpu=abc": cpu=abc is not a percent (1-100)'),
        ("cpu=0", {}, 'loadwise.io/hot-thresholds "cpu=0": cpu=0 is not a percent (1-100)'),
        ("cpu", {}, "loadwise.io/hot-thresholds \"cpu\": 'cpu' is not NAME=PERCENT"),
        ("cpu=70,cpu=60", {}, 'loadwise.io/hot-thresholds "cpu=70,cpu=60": cpu is given twice'),
    ],
)
def test_the_annotation_is_read_or_refused_whole_naming_the_value(
    value: str, found: dict[str, float], error: str
) -> None:
    assert parse_node_thresholds({"loadwise.io/hot-thresholds": value}) == (found, error)


def test_a_nodes_own_thresholds_beat_its_pools_which_beat_the_policys() -> None:
    gpu = {"name": "gpu", "weight": 1, "hotThreshold": 95}
    p = policy(
        dimensions=[gpu],
        pools=[
            {"name": "spot", "nodeSelector": SPOT, "hotThresholds": {"cpu": 50}},
            {"name": "all-labelled", "nodeSelector": {"matchExpressions": [
                {"key": "pool", "operator": "Exists"}]}, "hotThresholds": {"cpu": 60}},
        ],
    )  # fmt: skip
    plain = parse_node(node("plain"))
    spot = parse_node(node("spot", {"pool": "spot"}))
    noted = parse_node(node("noted", {"pool": "spot"}, "memory=70,gpu=85"))
    assert heat.thresholds_for(p, plain) == (80, 90, [95], "")
    assert heat.thresholds_for(p, spot) == (50, 90, [95], "pool spot")  # the first pool only
    assert heat.thresholds_for(p, noted) == (50, 70, [85], "node noted's annotation over pool spot")
    assert heat.thresholds_text(p, noted) == (
        "cpu 50%, memory 70%, gpu 85% (node noted's annotation over pool spot)"
    )
    refused = parse_node(node("refused", {"pool": "spot"}, "cpu=lots"))
    assert heat.thresholds_for(p, refused) == (50, 90, [95], "pool spot")
    nodes = {n.name: n for n in (plain, spot, refused)}
    lonely = policy(pools=[{"name": "gpu", "nodeSelector": {"matchLabels": {"gpu": "a100"}},
                            "hotThresholds": {"cpu": 90}}])  # fmt: skip
    assert heat.thresholds_problems(lonely, nodes) == [
        "pool gpu selects no node",
        'node refused: loadwise.io/hot-thresholds "cpu=lots": cpu=lots is not a percent (1-100) '
        "(ignored)",
    ]


def test_placement_and_the_hot_count_pass_over_a_node_hot_by_its_pools_threshold() -> None:
    p = policy(pools=[{"name": "spot", "nodeSelector": SPOT, "hotThresholds": {"cpu": 50}}])
    state = state_with(node("spot-1", {"pool": "spot"}), node("steady"))
    samples = {"spot-1": NodeSample(0.55, 0.2, NOW), "steady": NodeSample(0.7, 0.2, NOW)}
    result = schedule_one(pod_info(cpu="10m"), state, Basis(p, samples, NOW, random.Random(1)))
    assert isinstance(result, Decision) and result.node == "steady"  # 70% < 80%: cool
    assert heat.hot_nodes(p, samples, state.nodes, NOW) == {"spot-1": {"cpu": pytest.approx(0.05)}}
    # without the pool the same figures choose the emptier node
    result = schedule_one(
        pod_info(cpu="10m"), state, Basis(policy(), samples, NOW, random.Random(1))
    )
    assert isinstance(result, Decision) and result.node == "spot-1"


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        (
            [{"name": "all", "nodeSelector": {}, "hotThresholds": {"cpu": 50}}],
            "pool all: an empty nodeSelector selects every node",
        ),
        (
            [{"name": "g", "nodeSelector": SPOT, "hotThresholds": {"dimensions": {"gpu": 50}}}],
            "pool g: hotThresholds.dimensions names 'gpu', which spec.dimensions does not declare",
        ),
        (
            [{"name": "s", "nodeSelector": SPOT, "hotThresholds": {}}] * 2,
            "pool 's' is listed twice",
        ),
        (
            [{"name": "s", "nodeSelector": SPOT, "hotThresholds": {"cpu": 0}}],
            "spec.pools.0.hotThresholds.cpu",
        ),
    ],
)
def test_bad_pools_are_refused_naming_the_field(pools: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_spec({"pools": pools})
