"""The chart's Grafana dashboard: well-formed, every query names metrics loadwise exports and
variables the dashboard defines, and the chart ships it in a sidecar-labelled ConfigMap only
when asked. (tests/cluster/test_dashboard.py runs every query against a real Prometheus.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

from loadwise import observability  # noqa: F401 - registers the metrics
from loadwise_dev.controlplane import helm_binary

CHART = Path(__file__).parents[2] / "charts" / "loadwise"
DASHBOARD = CHART / "dashboards" / "loadwise.json"
BUILTINS = {"__rate_interval", "__interval", "__range"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def exported() -> set[str]:
    """Every series name loadwise can expose (histograms with their _bucket/_sum/_count)."""
    names = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_count", "_sum"))
    return names


def test_panels_are_well_formed() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "loadwise"
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_queries_use_only_defined_variables_and_exported_metrics() -> None:
    variables = {v["name"] for v in dashboard()["templating"]["list"]}
    names = exported()
    used = set()
    for title, expr in queries():
        for var in re.findall(r"\$(\w+)", expr):
            assert var in variables | BUILTINS, f"{title}: ${var} is not defined"
        metrics = re.findall(r"\b((?:scheduler|loadwise)_[a-z_]+)\b", expr)
        assert metrics, title
        for metric in metrics:
            assert metric in names, f"{title}: {metric} is not exported"
        used.update(metrics)
    # The headline metrics of both families are on the board.
    assert {
        "scheduler_schedule_attempts_total",
        "scheduler_pending_pods",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "loadwise_placements_total",
        "loadwise_hot_nodes_passed_over_total",
        "loadwise_metrics_last_success_timestamp_seconds",
        "loadwise_node_utilisation_ratio",  # the outcome: how loaded the nodes are
        "loadwise_policy_hot_nodes",
    } <= used
    # One Grafana, many clusters: every query is scoped by the `cluster` variable.
    for title, expr in queries():
        assert expr.count('cluster=~"$cluster"') == expr.count('job=~"$job"') >= 1, title


def render(*sets: str) -> list[dict[str, Any]]:
    args = [str(helm_binary()), "template", "lw", str(CHART)]
    for value in sets:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_the_chart_ships_the_dashboard_in_a_sidecar_configmap_when_enabled() -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("-dashboard")]
    (configmap,) = [
        d
        for d in render("dashboards.enabled=true")
        if d["metadata"]["name"] == "lw-loadwise-dashboard"
    ]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["loadwise.json"]) == dashboard()
