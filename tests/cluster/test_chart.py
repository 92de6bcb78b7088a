"""e2e: `helm install` the chart into the local control plane, then run the operator with the
chart's ServiceAccount token and the settings its Deployment renders. No kubelet runs here, so
the Deployment's pod itself never starts; the operator runs in-process with exactly its identity,
which proves the ClusterRole is sufficient. A fixed expected rule list keeps it minimal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadwise.config import Config
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.controlplane import helm_binary, kubeconfig, pinned_versions
from loadwise_dev.kube import Kube

from .conftest import POLICIES
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "loadwise"
RELEASE, NAMESPACE = "lw", "loadwise-system"
EXPECTED_RULES = [
    {
        "apiGroups": [""],
        "resources": ["nodes", "pods", "namespaces"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [""],
        "resources": ["services", "replicationcontrollers"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["replicasets", "statefulsets"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {
        "apiGroups": ["loadwise.io"],
        "resources": ["schedulingpolicies"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {"apiGroups": ["loadwise.io"], "resources": ["schedulingpolicies/status"], "verbs": ["patch"]},
]
# Only with the metrics-server source (metrics.sources).
METRICS_API_RULE = {
    "apiGroups": ["metrics.k8s.io"],
    "resources": ["nodes", "pods"],
    "verbs": ["get", "list"],
}
LEASE_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update"],
    }
]


async def helm(cluster: LocalCluster, *args: str, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        str(helm_binary()),
        "--kubeconfig",
        str(cluster.cp.kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0 or not check, err.decode()
    return out.decode()


async def test_chart_renders_the_minimal_rules(local_cluster: LocalCluster) -> None:
    # Lint, schema and the rest of the rendering: tests/unit/test_chart_values.py.
    version = pinned_versions()["K8S_VERSION"]
    rendered = await helm(local_cluster, "template", "x", str(CHART), "--kube-version", version)
    assert "cluster-admin" not in rendered
    assert "runAsNonRoot: true" in rendered
    assert cluster_role_rules(rendered) == EXPECTED_RULES
    with_metrics_api = await helm(
        local_cluster, "template", "x", str(CHART), "--kube-version", version,
        "--set", "metrics.sources=prometheus\\,metrics-server",
    )  # fmt: skip
    assert cluster_role_rules(with_metrics_api) == [*EXPECTED_RULES, METRICS_API_RULE]


def cluster_role_rules(rendered: str) -> list[dict[str, Any]]:
    (role,) = (
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "x-loadwise"
    )
    rules: list[dict[str, Any]] = role["rules"]
    return rules


async def test_helm_install_then_schedule_with_the_charts_service_account(
    kube: Kube, local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    assert local_cluster.prometheus is not None
    await local_cluster.add_node(kube, "n1", cpu_usage=0.7)
    await local_cluster.add_node(kube, "n2", cpu_usage=0.2)
    await local_cluster.wait_metrics({"n1": 0.7, "n2": 0.2})
    await helm(
        local_cluster,
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
        "--set", f"metrics.prometheusUrl={local_cluster.prometheus.url}",
        "--set", "metrics.lagSeconds=6",
    )  # fmt: skip
    try:
        role = await kube.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-loadwise")
        assert role["rules"] == EXPECTED_RULES

        deployment = await kube.get(
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-loadwise"
        )
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        assert env["LOADWISE_LEADER_ELECT"] == "true"
        assert deployment["spec"]["replicas"] == 2
        lease_role = await kube.get(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles/"
            f"{RELEASE}-loadwise-leader-election"
        )
        assert lease_role["rules"] == LEASE_RULES
        await kube.get(
            f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{RELEASE}-loadwise"
        )
        # The chart's settings, with the simulation's CPU window; no HTTP port in-process.
        config = Config.from_env(env).model_copy(
            update={
                "http_port": 0,
                "prometheus_cpu_query": local_cluster.operator_config().prometheus_cpu_query,
                "metrics_interval": 1.0,
            }
        )
        sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        token = await kube.create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        sa_kubeconfig = tmp_path / "sa.kubeconfig"
        sa_kubeconfig.write_text(
            kubeconfig(local_cluster.cp.server, local_cluster.cp.ca_file, token["status"]["token"])
        )

        async with running_operator(config, sa_kubeconfig):
            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", manifests.pod("chart-pod", namespace=ns)
            )
            assert (await wait_bound(kube, ns, ["chart-pod"]))["chart-pod"] == "n2"
            await wait_event(kube, ns, "chart-pod", "Scheduled")
            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", manifests.pod("too-big", namespace=ns, cpu="64")
            )
            await wait_event(kube, ns, "too-big", "FailedScheduling")

            async def policy_ready() -> bool:
                status = (await kube.get(f"{POLICIES}/default")).get("status") or {}
                return any(c["status"] == "True" for c in status.get("conditions") or ())

            await wait_for(policy_ready, 15, what="chart's default policy Ready")

            async def marked() -> dict[str, Any] | None:
                # The event is written first, then the condition: wait for the second write.
                pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/too-big")
                conditions = {c["type"]: c for c in pod["status"].get("conditions") or ()}
                return conditions.get("PodScheduled")

            scheduled = await wait_for(marked, 15, what="PodScheduled condition on too-big")
            assert scheduled["reason"] == "Unschedulable"
            lease = await kube.get(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{RELEASE}-loadwise"
            )
            assert lease["spec"]["holderIdentity"]  # it leads through the chart's Role
            policy = await kube.get(f"{POLICIES}/default")
            assert not policy["metadata"].get("finalizers")  # nothing can hold a deletion
            await helm(local_cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
            # No finalizer: the release's policy goes with it, uninstall never hangs.
            assert not await kube.exists(f"{POLICIES}/default")
    finally:
        await helm(
            local_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False
        )
