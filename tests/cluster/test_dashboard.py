"""The chart's Grafana dashboard against the real thing: a Prometheus scrapes a running loadwise
(its plain-HTTP metrics port, the development opt-in), pods are scheduled (one onto a cluster
with a hot node, one too big for any node, one gated), and then every panel's query, with the
dashboard's variables filled in as Grafana would, must return data."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.controlplane import free_port
from loadwise_dev.kube import Kube
from loadwise_dev.prometheus_server import Prometheus

from .conftest import POLICIES, OperatorFactory
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster

DASHBOARD = Path(__file__).parents[2] / "charts" / "loadwise" / "dashboards" / "loadwise.json"
SCHEDULER = "loadwise-scheduler"


def panel_queries(variables: dict[str, str]) -> list[tuple[str, str]]:
    """(panel title, expr) for every target, with $variables substituted."""
    board = json.loads(DASHBOARD.read_text())
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", ()):
            expr = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], target["expr"])
            out.append((f"{panel['title']} [{target['refId']}]", expr))
    return out


def series(prometheus: Prometheus, expr: str) -> list[dict[str, Any]]:
    answer = prometheus.query(expr)
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


async def test_every_panel_returns_data_from_prometheus_scraping_loadwise(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    for name, usage in (("hot", 0.97), ("cool-1", 0.2), ("cool-2", 0.3)):
        await local_cluster.add_node(kube, name, cpu_usage=usage, cpu="4")
    await local_cluster.wait_metrics({"hot": 0.97, "cool-1": 0.2, "cool-2": 0.3})
    port = free_port()
    prometheus = Prometheus([f"127.0.0.1:{port}"]).start()
    try:
        # Started before any policy exists: no_policy is raised and then cleared (Degradations).
        async with operator(http_port=port) as runtime:
            await kube.create(POLICIES, manifests.policy("board"))
            # Every decision must be the policy's: wait until the operator has it (a pod
            # decided before its watch event is judged by the built-in default instead).
            await wait_for(
                lambda: asyncio.sleep(0, "board" in runtime.scheduler.policies.names()),
                30,
                what="the policy applied",
            )
            pods = [f"p{i}" for i in range(6)]
            for name in pods:
                await kube.create(
                    f"/api/v1/namespaces/{ns}/pods", manifests.pod(name, namespace=ns)
                )
            await wait_bound(kube, ns, pods)
            groups = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
            await kube.create(groups, manifests.pod_group("gang", ns, 2))
            gang = [f"g{i}" for i in range(2)]
            for name in gang:
                member = manifests.in_group(manifests.pod(name, namespace=ns), "gang")
                await kube.create(f"/api/v1/namespaces/{ns}/pods", member)
            await wait_bound(kube, ns, gang)
            big = manifests.pod("too-big", namespace=ns, cpu="64")
            await kube.create(f"/api/v1/namespaces/{ns}/pods", big)
            await wait_event(kube, ns, "too-big", "FailedScheduling")
            gated = manifests.pod("gated", namespace=ns)
            gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
            await kube.create(f"/api/v1/namespaces/{ns}/pods", gated)

            variables = {
                "cluster": ".*",  # no cluster label here: the variable's "All"
                "job": ".+",  # the variables' "All"
                "profile": SCHEDULER,
                "policy": "board",
                "__rate_interval": "1m",
            }
            queries = panel_queries(variables)
            empty: list[str] = []

            async def all_answer() -> bool:
                empty[:] = [
                    title
                    for title, expr in queries
                    if not await asyncio.to_thread(series, prometheus, expr)
                ]
                return not empty

            try:
                await wait_for(all_answer, 60, interval=2, what="every panel to return data")
            except TimeoutError:
                raise AssertionError(f"panels without data: {empty}") from None

            # And the data says what happened, not just that series exist.
            def value(expr: str, **labels: str) -> float:
                for item in series(prometheus, expr):
                    if all(item["metric"].get(k) == v for k, v in labels.items()):
                        return float(item["value"][1])
                raise AssertionError(f"no series {labels} for {expr}")

            attempts = f'scheduler_schedule_attempts_total{{profile="{SCHEDULER}"}}'
            assert value(attempts, result="scheduled") >= 8
            assert value("loadwise_pod_group_decisions_total", result="placed") >= 1
            assert value(attempts, result="unschedulable") >= 1
            # too-big went through the PostFilter (nothing of lower priority to evict).
            assert value("scheduler_preemption_attempts_total") >= 1
            # too-big waits (parked, or retried after the parking timeout); gated is not tried.
            assert value('sum(scheduler_pending_pods{queue!="gated"})') == 1
            assert value("scheduler_pending_pods", queue="gated") == 1
            passed_over = 'loadwise_hot_nodes_passed_over_total{policy="board"}'
            assert value(passed_over) >= 8  # the hot node, at every decision
            placed = 'loadwise_placements_total{policy="board"}'
            assert value(placed, basis="metrics") >= 8
            assert value("loadwise_degraded", reason="no_policy") == 0  # raised, then cleared
    finally:
        prometheus.stop()
