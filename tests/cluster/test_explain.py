"""`loadwise explain`: the dry-run table for a pod, against the real API and Prometheus."""

from __future__ import annotations

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster
from loadwise_dev.kube import Kube

from .conftest import POLICIES

pytestmark = pytest.mark.cluster


async def test_explain_shows_every_nodes_verdict_without_binding(
    kube: Kube, local_cluster: LocalCluster, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(local_cluster.cp.kubeconfig))
    await local_cluster.add_node(kube, "idle", cpu_usage=0.1)
    await local_cluster.add_node(kube, "busy", cpu_usage=0.6)
    await local_cluster.add_node(kube, "scorching", cpu_usage=0.95)
    tainted = manifests.node("tainted")
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    await kube.create("/api/v1/nodes", tainted)
    await kube.create(POLICIES, manifests.policy("default"))
    await local_cluster.wait_metrics({"idle": 0.1, "busy": 0.6, "scorching": 0.95})
    # A pod nobody schedules: explain must not bind it.
    body = manifests.pod("mystery", namespace=ns, scheduler_name="loadwise-scheduler")
    await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
    output = await _explain(f"{ns}/mystery", local_cluster.operator_config())
    lines = {line.split()[0]: line for line in output.splitlines()[3:]}
    assert output.splitlines()[0].startswith(f"{ns}/mystery -> idle (policy default")
    # 100m/128Mi requests x 1.5 and x 1; the pod has no controller, so nothing learned.
    assert output.splitlines()[1] == (
        "strategy Spread; estimate 0.15 cpu, 128Mi: 1.5 x cpu, 1 x memory requests "
        "(missing requests count as 100m/200Mi)"
    )
    assert lines["idle"].endswith("chosen") and "metrics" in lines["idle"]
    assert lines["busy"].endswith("feasible")
    assert lines["scorching"].endswith("hot: passed over")
    assert lines["tainted"].endswith("node(s) had untolerated taint {dedicated: gpu}")
    pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/mystery")
    assert not pod["spec"].get("nodeName")
    # It says whose settings judged the metrics: its own, which may differ from the operator's.
    settings = output.splitlines()[-1]
    assert settings.startswith("settings: this command's LOADWISE_* environment, not read")
    assert f"Prometheus {local_cluster.operator_config().sources.prometheus.url}" in settings
