"""`loadwise run` with LOADWISE_LOG_FORMAT=json as a real process: every line it writes is one
JSON object, and at DEBUG the decision line for a pod it binds names the pod, node and policy.
The process's start-up lists of pods and nodes come from its prefetch (prefetch.py) against the
real API server: a pod pending before it started is placed from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster
from loadwise_dev.kube import Kube
from loadwise_dev.replicas import Replica

from .conftest import POLICIES
from .util import wait_bound

pytestmark = pytest.mark.cluster


async def test_every_line_is_json_and_the_decision_has_its_fields(
    kube: Kube, local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    assert local_cluster.prometheus is not None
    await local_cluster.add_node(kube, "n1", cpu_usage=0.1)
    await kube.create(POLICIES, manifests.policy("logged"))
    config = local_cluster.operator_config()  # the session cluster's queries
    settings = {
        "LOADWISE_METRICS_SOURCES": "prometheus",
        "LOADWISE_PROMETHEUS_URL": local_cluster.prometheus.url,
        "LOADWISE_PROMETHEUS_PRESET": config.sources.prometheus.preset,
        "LOADWISE_PROMETHEUS_CPU_QUERY": config.sources.prometheus.cpu_query,
        "LOADWISE_PROMETHEUS_MEMORY_QUERY": config.sources.prometheus.memory_query,
        "LOADWISE_METRICS_LAG": "6",
        "LOADWISE_LEADER_ELECT": "false",
        "LOADWISE_LOG_FORMAT": "json",
        "LOADWISE_LOG_LEVEL": "DEBUG",
    }
    await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("early", namespace=ns))
    replica = Replica("json-logs", local_cluster.cp.kubeconfig, settings, tmp_path).start()
    try:
        await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("web", namespace=ns))
        await wait_bound(kube, ns, ["early", "web"])
    finally:
        assert replica.stop() == 0, replica.log_text()[-2000:]
    lines = replica.log_text().splitlines()
    assert len(lines) > 5
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    assert all({"ts", "level", "logger", "msg"} <= set(entry) for entry in parsed)
    (bound,) = [e for e in parsed if e["msg"].startswith(f"bound {ns}/web to n1")]
    assert bound["level"] == "DEBUG" and bound["logger"] == "loadwise.scheduler.binding.cycle"
    assert (bound["pod"], bound["node"], bound["policy"]) == (f"{ns}/web", "n1", "logged")
    prefetched = {e["msg"] for e in parsed if e["logger"] == "loadwise.kube.transport"}
    assert prefetched == {
        f"list of /api/v1/{kind} read from its start-up prefetch" for kind in ("pods", "nodes")
    }
