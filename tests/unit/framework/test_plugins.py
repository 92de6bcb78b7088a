"""A plugin added as docs/architecture.md shows it: one class, one registration; the
full cycle, the score index and the requeue checks all follow from its declared inputs."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from loadwise.framework.context import Basis, CycleContext
from loadwise.framework.cycle import Decision, Unschedulable, schedule_one
from loadwise.framework.index import ScoreIndex
from loadwise.framework.plugin import FilterPlugin, Inputs, ScorePlugin
from loadwise.framework.plugins import DEFAULT_PLUGINS
from loadwise.framework.profile import DEFAULT_PROFILE, Profile
from loadwise.framework.types import NodeInfo, parse_node
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise_dev import manifests

from ...helpers import pod_info, state_with


class Maintenance(FilterPlugin):
    name = "Maintenance"
    inputs = Inputs(pod=("tolerations",), node=("labels",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        if node.labels.get("example.com/maintenance") == "true" and not ctx.pod.tolerations:
            return ["node(s) were in maintenance"]
        return None


PROFILE = Profile((*DEFAULT_PLUGINS, Maintenance()))


def test_a_new_filter_works_in_the_cycle_and_the_index() -> None:
    state = state_with(
        manifests.node("busy", labels={"example.com/maintenance": "true"}),
        manifests.node("ok", cpu="1"),
    )
    rng = random.Random(0)
    for schedule in (
        lambda pod: schedule_one(pod, state, Basis(DEFAULT_POLICY, {}, 0.0, rng), PROFILE),
        lambda pod: ScoreIndex(PROFILE).schedule(pod, state, Basis(DEFAULT_POLICY, {}, 0.0, rng)),
    ):
        first = schedule(pod_info("a"))
        assert isinstance(first, Decision) and first.node == "ok"
        refused = schedule(pod_info("b", cpu="2"))
        assert isinstance(refused, Unschedulable)
        assert "1 node(s) were in maintenance" in refused.message


class PreferFast(ScorePlugin):
    """A preference for nodes labelled fast, for every pod (it overrides no `sign`)."""

    name = "PreferFast"
    inputs = Inputs(node=("labels",))
    weight = 100

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        return [100.0 if n.labels.get("example.com/fast") == "true" else 0.0 for n in nodes]


def test_a_new_score_plugin_counts_in_the_cycle_and_the_index() -> None:
    """The busier node is fast: by load alone both paths would take the idle one. A score
    plugin takes the pods it applies to off the batching path, so the index scores it too."""
    state = state_with(
        manifests.node("idle", cpu="8"),
        manifests.node("fast", cpu="8", labels={"example.com/fast": "true"}),
    )
    state.observe_bound(pod_info("busy", cpu="4", node="fast"), terminal=False)
    profile = Profile((*DEFAULT_PLUGINS, PreferFast()))
    for prof in (DEFAULT_PROFILE, profile):
        decisions = [
            schedule_one(
                pod_info("a"), state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0)), prof
            ),
            ScoreIndex(prof).schedule(
                pod_info("a"), state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0))
            ),
        ]
        want = "fast" if prof is profile else "idle"
        assert [d.node for d in decisions if isinstance(d, Decision)] == [want, want]


class LocalScore(PreferFast):
    node_local = True


class Undeclared(FilterPlugin):
    name = "Undeclared"

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        return None


def test_a_plugin_must_declare_node_local_and_a_score_plugin_cannot_be() -> None:
    with pytest.raises(ValueError, match="Undeclared does not declare node_local"):
        Profile((*DEFAULT_PLUGINS, Undeclared()))
    with pytest.raises(ValueError, match="score plugin LocalScore declares node_local = True"):
        Profile((*DEFAULT_PLUGINS, LocalScore()))


def test_its_declared_inputs_drive_requeueing() -> None:
    alone = Profile((Maintenance(),))
    before = parse_node(manifests.node("n"))
    relabelled = parse_node(manifests.node("n", labels={"example.com/maintenance": "true"}))
    cordoned = parse_node(manifests.node("n", unschedulable=True))
    assert alone.node_changed(before, relabelled)  # labels: declared
    assert not alone.node_changed(before, cordoned)  # not read by it, so no requeue
    assert alone.pod_fields == ("tolerations",)


def test_the_score_index_names_no_plugin_class() -> None:
    """The index takes a plugin's fast path from its declaration (`fast_path`), so a plugin
    added or replaced needs no edit there: neither the index, its fast paths, nor the cycle
    imports a plugin class (the load plugin too is found by its role, LoadPlugin)."""
    import ast
    import importlib
    from pathlib import Path

    from loadwise.framework import by_domain, cycle, index, shapes
    from loadwise.framework.plugin import Plugin

    modules = (index, by_domain, shapes, cycle)
    trees = [ast.parse(Path(m.__file__ or "").read_text()) for m in modules]
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.module and "plugins" in node.module:
            module = importlib.import_module(f"loadwise.framework.{node.module.lstrip('.')}")
            for alias in node.names:
                value = getattr(module, alias.name)
                assert not (isinstance(value, type) and issubclass(value, Plugin)), alias.name
