"""`loadwise run` with credentials that cannot work, against the real API server: one clear line
and a non-zero exit, not a traceback retried for ever; `loadwise explain` warns when it cannot
read the metrics the operator reads."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadwise.config import Config
from loadwise.explain import _explain
from loadwise.preflight import needed
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster
from loadwise_dev.controlplane import kubeconfig, make_pki
from loadwise_dev.kube import Kube

from .conftest import POLICIES

pytestmark = pytest.mark.cluster


def run_operator(config_file: Path, timeout: float = 60) -> tuple[int, str, float]:
    """(exit code, stderr, seconds) of `loadwise run` with only this kubeconfig."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADWISE_", "KUBERNETES_"))}
    env.update(KUBECONFIG=str(config_file), LOADWISE_HTTP_PORT="0", LOADWISE_SECURE_PORT="0")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "loadwise", "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def assert_one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


async def service_account_kubeconfig(
    kube: Kube, cluster: LocalCluster, namespace: str, name: str, path: Path
) -> Path:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}}
    )
    token = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    text = kubeconfig(cluster.cp.server, cluster.cp.ca_file, token["status"]["token"])
    await asyncio.to_thread(path.write_text, text)
    return path


def test_missing_and_broken_kubeconfig(tmp_path: Path) -> None:
    code, err, took = run_operator(tmp_path / "missing")
    assert code == 1 and took < 30
    assert assert_one_line(err) == (
        f"loadwise: no Kubernetes credentials: kubeconfig {tmp_path / 'missing'} does not exist"
    )
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nclusters: [\n")
    code, err, _ = run_operator(broken)
    assert code == 1
    assert assert_one_line(err).startswith(f"loadwise: cannot use KUBECONFIG={broken}: ")


async def test_a_rejected_token_is_one_line_401(
    local_cluster: LocalCluster, kube: Kube, tmp_path: Path
) -> None:
    bad = tmp_path / "bad-token"
    bad.write_text(kubeconfig(local_cluster.cp.server, local_cluster.cp.ca_file, "not-a-token"))
    code, err, took = await asyncio.to_thread(run_operator, bad)
    assert code == 1 and took < 30
    line = assert_one_line(err)
    assert line.startswith(f"loadwise: the API server at {local_cluster.cp.server} rejected")
    assert "(401 Unauthorized)" in line and f"KUBECONFIG={bad}" in line


async def test_a_server_certificate_from_another_ca_is_one_line(
    local_cluster: LocalCluster, kube: Kube, tmp_path: Path
) -> None:
    await asyncio.to_thread(make_pki, tmp_path / "other")
    stranger = tmp_path / "other-ca"
    stranger.write_text(
        kubeconfig(local_cluster.cp.server, tmp_path / "other" / "ca.crt", local_cluster.cp.token)
    )
    code, err, _ = await asyncio.to_thread(run_operator, stranger)
    assert code == 1
    line = assert_one_line(err)
    assert line.startswith(f"loadwise: cannot verify the API server at {local_cluster.cp.server}")
    assert "CERTIFICATE_VERIFY_FAILED" in line


async def test_missing_permissions_are_named_in_one_403_line(
    local_cluster: LocalCluster, kube: Kube, ns: str, tmp_path: Path
) -> None:
    nobody = await service_account_kubeconfig(kube, local_cluster, ns, "nobody", tmp_path / "a")
    code, err, took = await asyncio.to_thread(run_operator, nobody)
    assert code == 1 and took < 30
    line = assert_one_line(err)
    assert line.startswith(
        f"loadwise: system:serviceaccount:{ns}:nobody may not list nodes, watch nodes, list pods, "
        f"watch pods and {len(needed(Config())) - 4} more (403 Forbidden"
    )
    # Some of what it needs: only the rest is named.
    role = f"partial-{ns}"
    rules = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]}]
    await kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": role}, "rules": rules},
    )
    await kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": ns}],
        },
    )
    try:
        code, err, _ = await asyncio.to_thread(run_operator, nobody)
        line = assert_one_line(err)
        assert code == 1
        assert f"{ns}:nobody may not list namespaces, watch namespaces, list services," in line
        assert "nodes" not in line.split("(403")[0] and " pods," not in line
    finally:
        await kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
        await kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")


async def test_explain_warns_when_it_cannot_read_the_metrics(
    kube: Kube, local_cluster: LocalCluster, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(local_cluster.cp.kubeconfig))
    await local_cluster.add_node(kube, "idle", cpu_usage=0.1)
    await kube.create(POLICIES, manifests.policy("default"))
    body = manifests.pod("lonely", namespace=ns, scheduler_name="loadwise-scheduler")
    await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
    dead = local_cluster.operator_config(prometheus_url="http://127.0.0.1:1")
    output = await _explain(f"{ns}/lonely", dead)
    first = output.splitlines()[0]
    assert first.startswith("WARNING: cannot read metrics from prometheus (http://127.0.0.1:1")
    assert "every node below is scored by requests alone" in first
    assert output.splitlines()[1].startswith(f"{ns}/lonely -> idle")
    off = local_cluster.operator_config(metrics_sources=())
    output = await _explain(f"{ns}/lonely", off)
    assert output.startswith(
        "WARNING: policy default reads metrics from prometheus, which is not enabled"
    )
    await local_cluster.wait_metrics({"idle": 0.1})
    output = await _explain(f"{ns}/lonely", local_cluster.operator_config())
    assert not output.startswith("WARNING")
