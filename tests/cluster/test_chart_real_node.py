"""The chart on a real node: `helm install` with the image `make image` builds (imported into the
node's containerd: no registry here), and the kubelet runs it as the chart says. Its startup,
readiness and liveness probes pass over HTTPS, it holds the Lease and places a pod that then
runs on the node, `/metrics` answers over HTTPS only with an authorised token, and after its
process is killed inside the container (the kubelet restarts it) or its pod is deleted (the
Deployment makes another), scheduling resumes.

What cannot be real here: one machine means one network namespace for every hostNetwork pod,
so two replicas would share one port; this runs one (the election between two replicas is
tested with two operators in one process, tests/cluster/test_lifecycle.py). The pod uses the
host's network (this machine has no pod network without a private address range), and reaches
the API server at 127.0.0.1 (no kube-proxy turns the `kubernetes` Service's address into it),
as kube-scheduler's static pod reaches it on a control-plane node."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.controlplane import free_port
from loadwise_dev.kube import Kube, KubeError

from .test_chart import CHART, get, helm
from .test_image import REPO, podman_unavailable, run
from .test_real_nodes import burner
from .util import real_node_cluster

pytestmark = pytest.mark.cluster

NS, RELEASE, SCHEDULER = "lw-real", "lwr", "lw-real-scheduler"
NODE = "real-1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    reason = podman_unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the chart on a real node must run in CI: {reason}")
        pytest.skip(reason)
    with real_node_cluster() as local:
        local.cp.start_scheduler()  # places the chart's own pod, as in any cluster
        yield local


@pytest.fixture(scope="module")
async def kube(cluster: LocalCluster) -> AsyncIterator[Kube]:
    async with cluster.kube() as client:
        yield client


async def image_archive() -> tuple[str, Path]:
    """The image reference and its OCI archive, from the script `make image` runs."""
    started = time.monotonic()
    _, out, err = await run(str(REPO / "hack" / "build-image"))
    print(err, f"hack/build-image took {time.monotonic() - started:.1f} s", sep="")
    reference = out.split()[-1]
    version = reference.rsplit(":", 1)[1]
    return reference, REPO / "build" / "image" / f"loadwise-{version}.oci.tar"


async def the_pod(kube: Kube) -> dict[str, Any] | None:
    """The chart's pod once it is Ready (the kubelet's readiness probe passed)."""
    pods = await kube.list(
        f"/api/v1/namespaces/{NS}/pods", labelSelector="app.kubernetes.io/name=loadwise"
    )
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        conditions = pod.get("status", {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return pod
    return None


async def diagnosis(kube: Kube) -> str:
    pods = await kube.list(f"/api/v1/namespaces/{NS}/pods")
    events = await kube.list(f"/api/v1/namespaces/{NS}/events")
    lines = [f"{p['metadata']['name']}: {p.get('status')}" for p in pods]
    lines += [f"{e['reason']}: {e['message']}" for e in events[-20:]]
    return "\n".join(lines)


async def placed_and_running(kube: Kube, name: str) -> float:
    """Seconds until the pod (ours to schedule) runs on the node."""
    started = time.monotonic()
    body = burner(name, millicpu=0, scheduler_name=SCHEDULER)
    body["metadata"]["namespace"] = NS
    await kube.create(f"/api/v1/namespaces/{NS}/pods", body)

    async def running() -> bool:
        pod = await kube.get(f"/api/v1/namespaces/{NS}/pods/{name}")
        return pod["spec"].get("nodeName") == NODE and pod["status"].get("phase") == "Running"

    await wait_for(running, 90, interval=0.25, what=f"{name} placed by the chart's pod, running")
    return time.monotonic() - started


@pytest.mark.timeout(900)  # a cold image build included
async def test_the_charts_pod_runs_on_a_real_node_schedules_serves_and_recovers(
    cluster: LocalCluster, kube: Kube
) -> None:
    reference, archive = await image_archive()
    node = cluster.real_nodes[0]
    node.ctr("images", "import", str(archive))
    assert reference in node.ctr("images", "ls", "-q").split()
    port = free_port()
    api = urlsplit(cluster.cp.server)
    env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": api.hostname},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(api.port)},
    ]
    sets = {
        "image.repository": reference.rsplit(":", 1)[0],
        "image.tag": reference.rsplit(":", 1)[1],
        "image.pullPolicy": "Never",
        "replicas": "1",
        "hostNetwork": "true",
        "serving.host": "127.0.0.1",
        "serving.probeHost": "127.0.0.1",
        "serving.securePort": str(port),
        "service.port": str(port),
        "metrics.sources": "none",
        "schedulerName": SCHEDULER,
        "defaultPolicy.name": "default-real",
        "serviceMonitor.prometheusServiceAccount.name": "scraper",
    }
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    await helm(
        cluster, "install", RELEASE, str(CHART), "--namespace", NS, "--create-namespace",
        "--set-json", f"extraEnv={json.dumps(env)}", *args,
    )  # fmt: skip
    try:
        try:
            pod = await wait_for(lambda: the_pod(kube), 180, interval=0.5, what="the chart's pod")
        except TimeoutError:
            pytest.fail(await diagnosis(kube))
        assert pod["spec"]["nodeName"] == NODE and pod["spec"]["hostNetwork"] is True
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0
        name = pod["metadata"]["name"]
        lease = await kube.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{RELEASE}-loadwise"
        )
        assert lease["spec"]["holderIdentity"] == name

        first = await placed_and_running(kube, "burn-1")
        events = await kube.list(f"/api/v1/namespaces/{NS}/events")
        (scheduled,) = [
            e
            for e in events
            if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "burn-1"
        ]
        assert scheduled["reportingInstance"] == name  # this pod's process bound it

        # /metrics over HTTPS: a token with the chart's metrics-reader role, none refused.
        await kube.create(
            f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "scraper"}}
        )
        token = (
            await kube.create(
                f"/api/v1/namespaces/{NS}/serviceaccounts/scraper/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            )
        )["status"]["token"]
        url = f"https://127.0.0.1:{port}/metrics"
        assert (await get(url))[0] == 401
        code, text = await get(url, token)
        assert code == 200 and "loadwise_leader 1.0" in text

        # The process killed inside its container: the kubelet restarts it, it leads again.
        container = status["containerID"].removeprefix("containerd://")
        killed = time.monotonic()
        node.ctr("tasks", "kill", "--signal", "SIGKILL", container)

        async def restarted() -> dict[str, Any] | None:
            again = await the_pod(kube)
            if again is None:
                return None
            (s,) = again["status"]["containerStatuses"]
            return again if s["restartCount"] >= 1 and s["ready"] else None

        try:
            await wait_for(restarted, 120, interval=0.25, what="the container restarted, Ready")
        except TimeoutError:
            pytest.fail(f"{await diagnosis(kube)}\n{node.ctr('tasks', 'ls')}")
        back = await placed_and_running(kube, "burn-2")
        after_kill = time.monotonic() - killed

        # The pod deleted: the Deployment makes another, which takes the Lease over.
        deleted = time.monotonic()
        await kube.delete(f"/api/v1/namespaces/{NS}/pods/{name}")

        async def replaced() -> dict[str, Any] | None:
            new = await the_pod(kube)
            return new if new is not None and new["metadata"]["name"] != name else None

        await wait_for(replaced, 120, interval=0.25, what="a new pod of the Deployment, Ready")
        await placed_and_running(kube, "burn-3")
        after_delete = time.monotonic() - deleted

        # helm upgrade: a changed pod template rolls out (on hostNetwork the old pod goes
        # first: a new one could not share its ports on the node), and scheduling resumes.
        previous = (await the_pod(kube) or {}).get("metadata", {}).get("name")
        upgraded = time.monotonic()
        await helm(
            cluster, "upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values",
            "--set", "logLevel=DEBUG", "--wait", "--timeout", "180s",
        )  # fmt: skip

        async def rolled() -> dict[str, Any] | None:
            new = await the_pod(kube)
            return new if new is not None and new["metadata"]["name"] != previous else None

        new = await wait_for(rolled, 120, interval=0.25, what="the upgraded pod Ready")
        env = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
        assert env["LOADWISE_LOG_LEVEL"] == "DEBUG"
        await placed_and_running(kube, "burn-4")
        after_upgrade = time.monotonic() - upgraded
        await soft_taints_removed_by_the_hook(cluster, kube)
        print(
            f"chart on a real node: first placement {first:.1f} s after creation; after a "
            f"kill -9 a pod ran {after_kill:.1f} s later (its own placement {back:.1f} s); "
            f"after the pod's deletion {after_delete:.1f} s; after helm upgrade "
            f"{after_upgrade:.1f} s"
        )
    finally:
        with contextlib.suppress(AssertionError, KubeError):
            await helm(cluster, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "60s")
        with contextlib.suppress(KubeError):
            await kube.delete(f"/api/v1/namespaces/{NS}")


async def soft_taints_removed_by_the_hook(cluster: LocalCluster, kube: Kube) -> None:
    """Soft taints turned on, a node soft-tainted (by hand: this release reads no metrics),
    then turned off: the chart's post-upgrade hook Job runs `loadwise untaint` from the image
    on the node and removes the taint; the node's other taints stay, and the hook's objects are
    deleted once it succeeded."""
    await helm(
        cluster, "upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "softTaints.enabled=true", "--wait", "--timeout", "180s",
    )  # fmt: skip
    role = await kube.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-loadwise")
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["update"]} in role["rules"]
    path = f"/api/v1/nodes/{NODE}"
    own = [dict(t) for t in (await kube.get(path))["spec"].get("taints") or ()]
    ours = {"key": "loadwise.io/hot", "value": "true", "effect": "PreferNoSchedule"}
    await kube.merge_patch(path, {"spec": {"taints": [*own, ours]}})
    await helm(
        cluster, "upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "softTaints.enabled=false", "--timeout", "180s",
    )  # fmt: skip
    left = [
        {k: t.get(k) for k in ("key", "value", "effect")}
        for t in (await kube.get(path))["spec"].get("taints") or ()
    ]
    assert left == [{k: t.get(k) for k in ("key", "value", "effect")} for t in own]
    jobs = await kube.list(f"/apis/batch/v1/namespaces/{NS}/jobs")
    assert not [j for j in jobs if j["metadata"]["name"].endswith("-untaint")]
