"""e2e: `helm install` the chart into the local control plane, then run the operator with the
chart's ServiceAccount token and the settings its Deployment renders. No scheduler places the
Deployment's own pod (test_chart_real_node.py runs it on a real kubelet); the operator runs
in-process with exactly its identity, which proves the ClusterRole is sufficient. A fixed
expected rule list keeps it minimal.

The same identity serves /metrics as kube-scheduler does (TokenReview and SubjectAccessReview
through the chart's system:auth-delegator binding): real tokens are refused or let through by
the real API server's RBAC, and a real Prometheus scrapes it as the chart's ServiceMonitor says.
`helm uninstall --wait` returns promptly with the operator running and with it stopped."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from loadwise.config import Config
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.controlplane import (
    free_port,
    helm_binary,
    k8s_bin_dir,
    kubeconfig,
    pinned_versions,
)
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.prometheus_server import Prometheus

from .conftest import POLICIES
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "loadwise"
RELEASE, NAMESPACE = "lw", "loadwise-system"
CHART_POLICY = f"{RELEASE}-loadwise-default"  # the release-scoped fallback policy
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
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["deviceclasses", "resourceslices"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims"],
        "verbs": ["list", "watch", "update", "create", "delete"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/status"],
        "verbs": ["update", "patch"],
    },
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"], "verbs": ["list", "watch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups/status"], "verbs": ["patch"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["list", "watch"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups/status"], "verbs": ["patch"]},
    {
        "apiGroups": [""],
        "resources": ["persistentvolumeclaims", "persistentvolumes"],
        "verbs": ["list", "watch", "patch"],
    },
    {
        "apiGroups": ["storage.k8s.io"],
        "resources": [
            "storageclasses",
            "csinodes",
            "csidrivers",
            "csistoragecapacities",
            "volumeattachments",
        ],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
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
    assert not [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Job"]
    tainting = await helm(
        local_cluster, "template", "x", str(CHART), "--kube-version", version,
        "--set", "softTaints.enabled=true",
    )  # fmt: skip
    nodes = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["update"]}
    assert nodes in cluster_role_rules(tainting)
    assert [r for r in cluster_role_rules(tainting) if r != nodes] == EXPECTED_RULES
    (job,) = [d for d in yaml.safe_load_all(tainting) if d and d["kind"] == "Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-delete"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][0] == "untaint"


def cluster_role_rules(rendered: str) -> list[dict[str, Any]]:
    (role,) = (
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "x-loadwise"
    )
    rules: list[dict[str, Any]] = role["rules"]
    return rules


UNINSTALL_BOUND = 30.0  # seconds; `helm uninstall --wait` took 0.2-0.5 s here


async def install(cluster: LocalCluster, *sets: str) -> str:
    """`helm install` with the test cluster's Prometheus; returns helm's output (the NOTES)."""
    assert cluster.prometheus is not None
    values = [
        f"metrics.prometheusUrl={cluster.prometheus.url}",
        "metrics.lagSeconds=6",
        "serviceMonitor.prometheusServiceAccount.name=scraper",
        *sets,
    ]
    if cluster.usage is not None:  # KWOK's cAdvisor series, as that stack scrapes them
        values.append("metrics.preset=kube-prometheus-stack")
    args = [a for v in values for a in ("--set", v)]
    return await helm(
        cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
        *args,
    )  # fmt: skip


async def uninstall_within_bound(cluster: LocalCluster) -> float:
    started = time.monotonic()
    await helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s")
    elapsed = time.monotonic() - started
    assert elapsed < UNINSTALL_BOUND, f"helm uninstall --wait took {elapsed:.1f}s"
    return elapsed


async def service_account_token(kube: Kube, name: str) -> str:
    with contextlib.suppress(KubeError):  # 409: made by an earlier test
        await kube.create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": name}}
        )
    token = await kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    value: str = token["status"]["token"]
    return value


async def charts_operator(
    cluster: LocalCluster, kube: Kube, tmp_path: Path, secure_port: int = 0
) -> tuple[Config, Path]:
    """The settings the chart's Deployment renders (with the simulation's CPU window, loopback
    ports) and a kubeconfig with its ServiceAccount's token."""
    deployment = await kube.get(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-loadwise"
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = Config.from_env(env).but(
        secure_port=secure_port,
        http_host="127.0.0.1",
        prometheus_cpu_query=cluster.operator_config().sources.prometheus.cpu_query,
        metrics_interval=1.0,
    )
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    sa_kubeconfig = tmp_path / "sa.kubeconfig"
    sa_kubeconfig.write_text(
        kubeconfig(cluster.cp.server, cluster.cp.ca_file, await service_account_token(kube, sa))
    )
    return config, sa_kubeconfig


async def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=False) as response,
    ):
        return response.status, await response.text()


async def policy_ready(kube: Kube, name: str) -> bool:
    status = (await kube.get(f"{POLICIES}/{name}")).get("status") or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ()
    )


async def test_helm_install_then_schedule_and_serve_with_the_charts_service_account(
    kube: Kube, local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    await local_cluster.add_node(kube, "n1", cpu_usage=0.7)
    await local_cluster.add_node(kube, "n2", cpu_usage=0.2)
    await local_cluster.wait_metrics({"n1": 0.7, "n2": 0.2})
    notes = await install(local_cluster)
    assert "schedulerName: loadwise-scheduler" in notes  # NOTES.txt: how to opt a pod in
    try:
        role = await kube.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-loadwise")
        assert role["rules"] == EXPECTED_RULES
        lease_role = await kube.get(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles/"
            f"{RELEASE}-loadwise-leader-election"
        )
        assert lease_role["rules"] == LEASE_RULES
        await kube.get(
            f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{RELEASE}-loadwise"
        )
        await kube.get(f"/api/v1/namespaces/{NAMESPACE}/services/{RELEASE}-loadwise")
        port = free_port()
        config, sa_kubeconfig = await charts_operator(local_cluster, kube, tmp_path, port)
        assert (
            config.election.leader_elect and config.serving.http_port == 0
        )  # the chart opens no plain port
        scraper = await service_account_token(kube, "scraper")  # bound by the chart
        nosy = await service_account_token(kube, "nosy")  # a valid token, no permission

        async with running_operator(config, sa_kubeconfig):
            base = f"https://127.0.0.1:{port}"
            assert (await get(f"{base}/healthz"))[0] == 200  # probes: no token
            assert (await get(f"{base}/readyz"))[0] == 200
            status, text = await get(f"{base}/metrics")
            assert status == 401, text
            status, text = await get(f"{base}/metrics", nosy)
            assert status == 403, text
            assert f'"system:serviceaccount:{NAMESPACE}:nosy" cannot get path "/metrics"' in text
            status, text = await get(f"{base}/metrics", scraper)
            assert status == 200, text
            assert "loadwise_leader" in text
            await prometheus_scrapes_as_the_service_monitor_says(
                local_cluster, kube, port, {"scraper": scraper, "nosy": nosy}, tmp_path
            )

            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", manifests.pod("chart-pod", namespace=ns)
            )
            assert (await wait_bound(kube, ns, ["chart-pod"]))["chart-pod"] == "n2"
            scheduled = await wait_event(kube, ns, "chart-pod", "Scheduled")
            assert scheduled["message"].endswith(f"; policy {RELEASE}-loadwise-default")
            await kube.create(
                f"/api/v1/namespaces/{ns}/pods", manifests.pod("too-big", namespace=ns, cpu="64")
            )
            await wait_event(kube, ns, "too-big", "FailedScheduling")
            await wait_for(lambda: policy_ready(kube, CHART_POLICY), 15, what="default Ready")

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

            # A user's catch-all policy governs every pod, whatever its name: "web" sorts after
            # "default", and before `fallback` the chart's policy won it by name.
            await kube.create(
                POLICIES,
                {"apiVersion": "loadwise.io/v1alpha1", "kind": "SchedulingPolicy",
                 "metadata": {"name": "web"}, "spec": {}},
            )  # fmt: skip
            await wait_for(lambda: policy_ready(kube, "web"), 15, what="web Ready")
            await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("web-1", namespace=ns))
            scheduled = await wait_event(kube, ns, "web-1", "Scheduled")
            assert scheduled["message"].endswith("; policy web")

            policy = await kube.get(f"{POLICIES}/{CHART_POLICY}")
            assert not policy["metadata"].get("finalizers")  # nothing can hold a deletion
            await uninstall_within_bound(local_cluster)  # while the operator runs
            # No finalizer: the release's policy goes with it; the user's stays.
            assert not await kube.exists(f"{POLICIES}/{CHART_POLICY}")
            assert await kube.exists(f"{POLICIES}/web")
    finally:
        await helm(
            local_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False
        )


async def prometheus_scrapes_as_the_service_monitor_says(
    cluster: LocalCluster, kube: Kube, port: int, tokens: dict[str, str], tmp_path: Path
) -> None:
    """A real Prometheus configured as the Prometheus Operator turns the chart's ServiceMonitor
    endpoint into a scrape job (scheme, path, the bearer token, TLS settings). The default
    endpoint's token is the chart's scraper account's, from the token Secret the chart renders
    (the operator reads it into Prometheus' configuration; here, the test does): that target
    is up and loadwise's series arrive. The deprecated bearer token file (Prometheus' own
    account, which the chart binds to the metrics-reader role) works too; another account's
    token gets the target down. (This control plane has no ServiceMonitor CRD: the scraper
    objects are created from `helm template`.)"""
    rendered = await helm(
        cluster, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "serviceMonitor.enabled=true",
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    credentials = endpoint["authorization"]["credentials"]
    created: list[str] = []
    for kind, path in (
        ("ServiceAccount", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"),
        ("Secret", f"/api/v1/namespaces/{NAMESPACE}/secrets"),
        ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ):
        (doc,) = (d for d in docs if d["kind"] == kind and "scraper" in d["metadata"]["name"])
        with contextlib.suppress(KubeError):  # 409: made by an earlier run
            await kube.create(path, doc)
        created.append(f"{path}/{doc['metadata']['name']}")

    async def secret_token() -> str | None:
        secret = await kube.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{credentials['name']}")
        value = (secret.get("data") or {}).get(credentials["key"])
        return base64.b64decode(value).decode() if value else None

    tokens = {
        "chart-scraper": await wait_for(secret_token, 30, what="the scraper token Secret"),
        **tokens,
    }
    jobs = []
    for name, token in tokens.items():
        token_file = tmp_path / f"{name}.token"
        token_file.write_text(token)
        jobs.append(
            {
                "job_name": name,
                "scheme": endpoint["scheme"],
                "metrics_path": endpoint["path"],
                "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                "tls_config": {"insecure_skip_verify": endpoint["tlsConfig"]["insecureSkipVerify"]},
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            }
        )
    prometheus = await asyncio.to_thread(Prometheus([]).start)
    try:
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
        (prometheus.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        assert prometheus.process is not None
        prometheus.process.send_signal(signal.SIGHUP)  # reload the configuration

        async def scraped() -> dict[str, float] | None:
            answer = await asyncio.to_thread(prometheus.query, "up")
            ups = {r["metric"]["job"]: float(r["value"][1]) for r in answer["data"]["result"]}
            return ups if set(ups) == set(tokens) else None

        assert await wait_for(scraped, 30, interval=0.5, what="every job scraped") == {
            "chart-scraper": 1.0,
            "scraper": 1.0,
            "nosy": 0.0,
        }
        for job in ("chart-scraper", "scraper"):
            answer = await asyncio.to_thread(prometheus.query, f'loadwise_leader{{job="{job}"}}')
            assert answer["data"]["result"], f"loadwise's series did not arrive ({job})"
    finally:
        await asyncio.to_thread(prometheus.stop)
        for path in created:
            with contextlib.suppress(KubeError):
                await kube.delete(path)


async def test_helm_uninstall_returns_while_the_operator_is_down(
    kube: Kube, local_cluster: LocalCluster, clean: None, tmp_path: Path
) -> None:
    """The operator has read and written the release's policy, then stops: nothing it left
    behind (finalizers, owner references) may hold `helm uninstall --wait`."""
    await install(local_cluster)
    try:
        # An operator stopped after its release was uninstalled (the other test) could not
        # release its Lease: do not wait out that lease here.
        with contextlib.suppress(KubeError):
            await kube.delete(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{RELEASE}-loadwise"
            )
        config, sa_kubeconfig = await charts_operator(local_cluster, kube, tmp_path)
        async with running_operator(config, sa_kubeconfig):
            await wait_for(lambda: policy_ready(kube, CHART_POLICY), 15, what="default Ready")
        await uninstall_within_bound(local_cluster)
        for path in (
            f"{POLICIES}/{CHART_POLICY}",
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-loadwise",
            f"/api/v1/namespaces/{NAMESPACE}/services/{RELEASE}-loadwise",
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{RELEASE}-loadwise-auth-delegator",
        ):
            assert not await kube.exists(path), path
    finally:
        await helm(
            local_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False
        )


def wait_as_documented(local_cluster: LocalCluster, namespace: str) -> None:
    """docs/volumes.md's wait for the opt-in policy, run by bash with the real kubectl."""
    doc = (Path(__file__).parents[2] / "docs" / "volumes.md").read_text()
    line = next(x for x in doc.splitlines() if x.startswith("until [") and "opt-in-probe" in x)
    env = {
        **os.environ,
        "KUBECONFIG": str(local_cluster.cp.kubeconfig),
        "PATH": f"{k8s_bin_dir()}:{os.environ['PATH']}",
    }
    subprocess.run(
        ["bash", "-c", line.replace("-n team-a", f"-n {namespace}")],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


async def test_a_labelled_namespace_is_scheduled_by_loadwise_with_the_charts_rights(
    kube: Kube, local_cluster: LocalCluster, clean: None, tmp_path: Path
) -> None:
    """namespaceOptIn: the chart's MutatingAdmissionPolicy hands a labelled namespace's pods,
    a Deployment's and a StatefulSet's with claims, to loadwise, which binds their claims and
    pods with the chart's rights; an unlabelled namespace's pods and pods naming another
    scheduler are left alone; turning the value off removes the policy."""
    from .test_volumes import LOCAL, local_pv

    await local_cluster.add_node(kube, "n1")
    await local_cluster.add_node(kube, "n2")
    with contextlib.suppress(KubeError):
        await kube.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": LOCAL},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
    for name, node in (("opt-pv-1", "n1"), ("opt-pv-2", "n2")):
        await kube.create("/api/v1/persistentvolumes", local_pv(name, node))
    await install(local_cluster, "namespaceOptIn.enabled=true")
    opted, other = "opted-in", "not-opted-in"
    try:
        await kube.create(
            "/api/v1/namespaces",
            {"metadata": {"name": opted, "labels": {"loadwise.io/scheduler": "enabled"}}},
        )
        await kube.create("/api/v1/namespaces", {"metadata": {"name": other}})

        # The API server loads a new policy through an informer: until then pods are admitted
        # unchanged (for kube-scheduler). The wait docs/volumes.md tells users to run, as written.
        await asyncio.to_thread(wait_as_documented, local_cluster, opted)
        first = manifests.pod("first", namespace=opted, scheduler_name="default-scheduler")
        made = await kube.create(f"/api/v1/namespaces/{opted}/pods", first)
        assert made["spec"]["schedulerName"] == "loadwise-scheduler"
        await kube.delete(f"/api/v1/namespaces/{opted}/pods/first")
        config, sa_kubeconfig = await charts_operator(local_cluster, kube, tmp_path)
        async with running_operator(config, sa_kubeconfig):
            web = manifests.pod("x", namespace=opted, scheduler_name="default-scheduler")
            template = {"metadata": {"labels": {"app": "web"}}, "spec": web["spec"]}
            await kube.create(
                f"/apis/apps/v1/namespaces/{opted}/deployments",
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web"},
                    "spec": {
                        "replicas": 2,
                        "selector": {"matchLabels": {"app": "web"}},
                        "template": template,
                    },
                },
            )
            pod_spec = manifests.pod("x", namespace=opted, scheduler_name="default-scheduler")
            pod_spec["spec"]["containers"][0]["volumeMounts"] = [
                {"name": "data", "mountPath": "/d"}
            ]
            db = {"metadata": {"labels": {"app": "db"}}, "spec": pod_spec["spec"]}
            claim_template = {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": LOCAL,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
            await kube.create(
                f"/apis/apps/v1/namespaces/{opted}/statefulsets",
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": {"name": "db"},
                    "spec": {
                        "replicas": 2,
                        "podManagementPolicy": "Parallel",
                        "serviceName": "db",
                        "selector": {"matchLabels": {"app": "db"}},
                        "template": db,
                        "volumeClaimTemplates": [claim_template],
                    },
                },
            )
            elsewhere = manifests.pod("kept", namespace=other, scheduler_name="default-scheduler")
            await kube.create(f"/api/v1/namespaces/{other}/pods", elsewhere)
            named = manifests.pod("named", namespace=opted, scheduler_name="someone-else")
            await kube.create(f"/api/v1/namespaces/{opted}/pods", named)

            async def placed() -> list[Any] | None:
                pods = await kube.list(f"/api/v1/namespaces/{opted}/pods")
                ours = [p for p in pods if p["metadata"]["name"] != "named"]
                done = len(ours) == 4 and all(p["spec"].get("nodeName") for p in ours)
                return ours if done else None

            try:
                pods = await wait_for(placed, 60, what="the opted-in namespace's pods placed")
            except TimeoutError as exc:  # say what was not placed, and why
                seen = [
                    (p["metadata"]["name"], p["spec"]["schedulerName"], p["spec"].get("nodeName"))
                    for p in await kube.list(f"/api/v1/namespaces/{opted}/pods")
                ]
                said = [
                    (e["involvedObject"]["name"], e["reason"], e["message"][:200])
                    for e in await kube.list(f"/api/v1/namespaces/{opted}/events")
                ]
                raise AssertionError(f"{exc}: pods {seen}; events {said}") from exc
            assert {p["spec"]["schedulerName"] for p in pods} == {"loadwise-scheduler"}
            claims = await kube.list(f"/api/v1/namespaces/{opted}/persistentvolumeclaims")
            assert {c["status"]["phase"] for c in claims} == {"Bound"}
            by_pod = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
            volumes = {c["metadata"]["name"]: c["spec"]["volumeName"] for c in claims}
            for ordinal in (0, 1):  # each StatefulSet pod sits on its own volume's node
                pv = volumes[f"data-db-{ordinal}"]
                assert by_pod[f"db-{ordinal}"] == {"opt-pv-1": "n1", "opt-pv-2": "n2"}[pv]
            kept = await kube.get(f"/api/v1/namespaces/{other}/pods/kept")
            assert kept["spec"]["schedulerName"] == "default-scheduler"
            named_now = await kube.get(f"/api/v1/namespaces/{opted}/pods/named")
            assert named_now["spec"]["schedulerName"] == "someone-else"

        policies = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
        assert await kube.exists(f"{policies}/{RELEASE}-loadwise-namespace-opt-in")
        await helm(
            local_cluster, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE,
            "--reuse-values", "--set", "namespaceOptIn.enabled=false",
        )  # fmt: skip
        assert not await kube.exists(f"{policies}/{RELEASE}-loadwise-namespace-opt-in")
    finally:
        for name in (opted, other):
            with contextlib.suppress(KubeError):
                await kube.delete(f"/api/v1/namespaces/{name}")
        await helm(local_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
        for name in ("opt-pv-1", "opt-pv-2"):
            with contextlib.suppress(KubeError):
                await kube.delete(f"/api/v1/persistentvolumes/{name}")
