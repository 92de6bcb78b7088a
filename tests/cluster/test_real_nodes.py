"""loadwise on a real node: a kubelet with containerd running real containers on this machine
(loadwise_dev.realnode), beside simulated nodes, with the real node-exporter and the kubelet's
own metrics scraped by the real Prometheus. Its own control plane: the shared one's tests delete
every node between tests."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import pytest

from loadwise.config import Config
from loadwise.resources import to_amount
from loadwise.runtime import Runtime
from loadwise.usage.cache import NodeSample
from loadwise.usage.prometheus import PrometheusSource
from loadwise.usage.prometheus_answers import PrometheusError
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.images import BURN
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.prometheus_server import SIM_CPU_QUERY, Prometheus
from loadwise_dev.real_metrics_server import MetricsServer
from loadwise_dev.realnode import DRA_DRIVER, STACKS, RealNode, stack_scrape_configs

from .conftest import POLICIES
from .util import real_node_cluster, wait_bound, wait_event

pytestmark = pytest.mark.cluster
REAL = "real-1"
_names = itertools.count()


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[LocalCluster]:
    with real_node_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def rkube(real_cluster: LocalCluster) -> AsyncIterator[Kube]:
    async with real_cluster.kube() as client:
        await real_cluster.install_crd(client)
        yield client


@pytest.fixture
async def rns(rkube: Kube, real_cluster: LocalCluster) -> AsyncIterator[str]:
    name = f"r{next(_names)}"
    await rkube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    await real_cluster.wait_namespace(rkube, name)
    yield name
    # Graceful: the kubelet stops the containers and the pods go away by themselves.
    with contextlib.suppress(KubeError):
        await rkube.delete(f"/api/v1/namespaces/{name}")

    async def gone() -> bool:
        return not await rkube.list(f"/api/v1/namespaces/{name}/pods")

    await wait_for(gone, 60, interval=0.5, what=f"pods of {name} terminated by the kubelet")


@contextlib.asynccontextmanager
async def loadwise(cluster: LocalCluster, **overrides: Any) -> AsyncIterator[Runtime]:
    async with running_operator(cluster.operator_config(**overrides), cluster.cp.kubeconfig) as rt:
        yield rt


def burner(
    name: str, millicpu: int = 0, cpu: str = "100m", memory: str = "128Mi", **kw: Any
) -> dict[str, Any]:
    """A pod of the burn image (a real process using `millicpu` millicores). On the host's
    network: containerd needs an address from the pod network, and this machine may have
    none but loopback (see realnode.py)."""
    body = manifests.pod(name, cpu=cpu, memory=memory, **kw)
    spec = body["spec"]
    spec["terminationGracePeriodSeconds"] = 10
    spec["hostNetwork"] = True
    spec["dnsPolicy"] = "Default"
    container = spec["containers"][0]
    container["image"] = BURN
    container["imagePullPolicy"] = "Never"
    container["env"] = [{"name": "BURN_MILLICPU", "value": str(millicpu)}]
    return body


async def create_pod(kube: Kube, ns: str, body: dict[str, Any]) -> None:
    body["metadata"]["namespace"] = ns
    await kube.create(f"/api/v1/namespaces/{ns}/pods", body)


def kubectl(
    cluster: LocalCluster, *args: str, kubeconfig: str = ""
) -> subprocess.CompletedProcess[str]:
    config = kubeconfig or str(cluster.cp.kubeconfig)
    return subprocess.run(
        [cluster.cp.binary("kubectl"), f"--kubeconfig={config}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def wait_running(kube: Kube, ns: str, name: str, timeout: float = 60) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    try:
        return await wait_for(running, timeout, interval=0.5, what=f"{ns}/{name} Running")
    except TimeoutError as exc:  # say where it stood: scheduled? its claim? the kubelet's events?
        pod = await kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        events = await kube.list(f"/api/v1/namespaces/{ns}/events")
        said = [
            f"{e.get('reason')}: {e.get('message')}"
            for e in events
            if (e.get("involvedObject") or {}).get("name") == name
        ]
        status = pod.get("status", {})
        raise TimeoutError(
            f"{exc}; node {pod['spec'].get('nodeName')!r}, phase {status.get('phase')}, "
            f"conditions {status.get('conditions')}, containers "
            f"{status.get('containerStatuses')}, claims {status.get('resourceClaimStatuses')}; "
            f"events {said}"
        ) from exc


def deployment(ns: str, name: str, template: dict[str, Any], replicas: int) -> dict[str, Any]:
    labels = template["metadata"]["labels"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }


async def wait_all_running(kube: Kube, ns: str, selector: str, count: int) -> list[str]:
    async def running() -> list[str] | None:
        pods = await kube.list(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)
        names = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        return names if len(names) == count else None

    return await wait_for(running, 90, interval=0.5, what=f"{count} pods {selector} Running")


# --- the node itself ------------------------------------------------------------------------------
async def test_the_real_node_registers_as_a_node_with_its_own_identity(
    rkube: Kube, real_cluster: LocalCluster
) -> None:
    node = await rkube.get(f"/api/v1/nodes/{REAL}")
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"].startswith("v1.") and info["containerRuntimeVersion"].startswith(
        "containerd://"
    )
    # Only its name, which resolves to 127.0.0.1 for the API server: no address of this
    # machine's interfaces appears anywhere.
    assert node["status"]["addresses"] == [{"type": "Hostname", "address": REAL}]
    assert not [t for t in node["spec"].get("taints") or [] if "uninitialized" in t["key"]]
    # Its credentials are a node's: system:node:real-1 in system:nodes, and NodeRestriction
    # refuses it any other node.
    own = str(real_cluster.real_nodes[0].workdir / "kubelet.kubeconfig")
    whoami = kubectl(real_cluster, "auth", "whoami", "-o", "json", kubeconfig=own)
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:node:{REAL}" and "system:nodes" in user["groups"]
    await real_cluster.add_node(rkube, "someone-else")
    try:
        refused = kubectl(real_cluster, "label", "node", "someone-else", "x=y", kubeconfig=own)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    finally:
        await rkube.delete("/api/v1/nodes/someone-else")
    # Its lease is renewed (heartbeats), by itself.
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{REAL}"

    async def lease() -> dict[str, Any] | None:
        return await rkube.get(path) if await rkube.exists(path) else None

    first = (await wait_for(lease, 30, interval=0.5, what="the node lease"))["spec"]["renewTime"]

    async def renewed() -> bool:
        return bool((await rkube.get(path))["spec"]["renewTime"] != first)

    await wait_for(renewed, 30, interval=1.0, what="the node lease renewed")


async def test_the_articles_test_pod_and_a_tenant_deployment_run_on_the_real_node(
    rkube: Kube, real_cluster: LocalCluster, rns: str
) -> None:
    async with loadwise(real_cluster):
        # The source articles' verification pod: 100m / 128Mi with our schedulerName.
        await create_pod(rkube, rns, burner("test-pod"))
        await wait_bound(rkube, rns, ["test-pod"])
        pod = await wait_running(rkube, rns, "test-pod")
        assert pod["spec"]["nodeName"] == REAL
        event = await wait_event(rkube, rns, "test-pod", "Scheduled")
        assert event["source"]["component"] == "loadwise-scheduler"
        template = burner("x", labels={"tenant": "a", "app": "tenant-a"})
        await rkube.create(
            f"/apis/apps/v1/namespaces/{rns}/deployments", deployment(rns, "tenant-a", template, 2)
        )
        names = await wait_all_running(rkube, rns, "app=tenant-a", 2)
        for name in names:
            described = kubectl(real_cluster, "describe", "pod", "-n", rns, name).stdout
            assert "loadwise-scheduler" in described
            assert f"Successfully assigned {rns}/{name} to {REAL}" in described
            assert "Started" in described  # the kubelet's own event: the container runs


async def test_a_gang_runs_whole_on_the_real_node(
    rkube: Kube, real_cluster: LocalCluster, rns: str
) -> None:
    """Kubernetes' own PodGroup: three members, held until the third exists, then bound together
    and run by the kubelet."""
    groups = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{rns}/podgroups"
    async with loadwise(real_cluster):
        await rkube.create(groups, manifests.pod_group("trio", rns, 3))
        names = [f"member-{i}" for i in range(3)]
        for name in names[:2]:
            body = manifests.in_group(burner(name), "trio")
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": REAL}
            await create_pod(rkube, rns, body)
        await asyncio.sleep(2)
        pods = await rkube.list(f"/api/v1/namespaces/{rns}/pods")
        assert not any(p["spec"].get("nodeName") for p in pods)  # 2 of 3: none placed
        body = manifests.in_group(burner(names[2]), "trio")
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": REAL}
        await create_pod(rkube, rns, body)
        for name in names:
            pod = await wait_running(rkube, rns, name)
            assert pod["spec"]["nodeName"] == REAL

        async def scheduled() -> bool:
            raw = await rkube.get(f"{groups}/trio")
            conditions = (raw.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "PodGroupInitiallyScheduled" and c["status"] == "True"
                       for c in conditions)  # fmt: skip

        await wait_for(scheduled, 15, what="PodGroupInitiallyScheduled=True")


async def test_a_pod_with_a_resource_claim_runs_on_the_real_node_with_its_device(
    rkube: Kube, real_cluster: LocalCluster, rns: str
) -> None:
    """Dynamic resource allocation end to end on a real kubelet: the node's DRA driver (a
    kubelet plugin, hack/dra-driver) publishes its GPUs, the resourceclaim controller makes the
    pod's claim from a template, loadwise allocates a device and writes the claim, and the
    kubelet, which refuses a pod its claim is not reserved for, prepares it through the driver
    and runs the pod."""
    resource = "/apis/resource.k8s.io/v1"
    cls = f"real-gpu-{rns}"

    async def published() -> list[Any]:
        slices = await rkube.list(f"{resource}/resourceslices")
        return [s for s in slices if s["spec"].get("nodeName") == REAL]

    (slice_,) = await wait_for(published, 60, what="the real node's ResourceSlice")
    assert len(slice_["spec"]["devices"]) == 2
    selector = {"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}
    await rkube.create(
        f"{resource}/deviceclasses", {"metadata": {"name": cls}, "spec": {"selectors": [selector]}}
    )
    try:
        request = {"name": "gpu", "exactly": {"deviceClassName": cls}}
        template = {
            "metadata": {"name": "one-gpu", "namespace": rns},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        }
        await rkube.create(f"{resource}/namespaces/{rns}/resourceclaimtemplates", template)
        body = burner("trainer")
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        async with loadwise(real_cluster):
            await create_pod(rkube, rns, body)
            # The kubelet may fetch the claim before the node authorizer's graph has the bound
            # pod ("no relationship found between node ... and this object"); kubelet 1.37
            # then tries again only at its next sync, a minute on (kuberuntime_manager.go
            # returns from a failed PrepareDynamicResources without a sync error to back off on)
            pod = await wait_running(rkube, rns, "trainer", timeout=150)
        assert pod["spec"]["nodeName"] == REAL
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = await rkube.get(
            f"{resource}/namespaces/{rns}/resourceclaims/{status['resourceClaimName']}"
        )
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (DRA_DRIVER, REAL)
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    finally:
        with contextlib.suppress(KubeError):
            await rkube.delete(f"{resource}/deviceclasses/{cls}")


# --- real load ---------------------------------------------------------------------------------
async def test_a_real_node_made_hot_by_real_cpu_gets_nothing_new_while_a_cooler_node_fits(
    rkube: Kube, real_cluster: LocalCluster, rns: str
) -> None:
    prometheus = real_cluster.prometheus
    assert prometheus is not None
    # The cool node's 10% is the harness exporter's, read through a 5 s rate window. On a
    # machine the burners saturate, the exporter (a thread of this process) misses scrapes, and
    # a window holding two samples a second apart reads the node's idle time short: seen as
    # 66%, and 81% with four placements' estimates on 4 cores. So it is large (its estimates
    # add little) and the threshold (90%) is far above what such a gap reads, while the
    # saturated real node reads 100%.
    await real_cluster.add_node(rkube, "cool", cpu_usage=0.1, mem_usage=0.1, cpu="32")
    try:
        await rkube.create(
            POLICIES, manifests.policy("real", cpu=1, memory=0, hot_thresholds={"cpu": 90})
        )
        async with loadwise(real_cluster) as runtime:
            # Burners that request little and use much (what the source articles' Flink
            # TaskManagers did), placed on the real node by loadwise (a node selector): a whole
            # core each, so the machine (all the real node's CPU) is saturated whatever else
            # runs; a fraction of a core left it near the threshold on a busy machine.
            body = burner("x", millicpu=1000, labels={"app": "burn"})
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": REAL}
            await rkube.create(
                f"/apis/apps/v1/namespaces/{rns}/deployments", deployment(rns, "burn", body, 2)
            )
            await wait_all_running(rkube, rns, "app=burn", 2)

            def real_cpu() -> float:
                answer = prometheus.query(SIM_CPU_QUERY)
                seen = {r["metric"]["node"]: float(r["value"][1]) for r in answer["data"]["result"]}
                return seen.get(REAL, 0.0)

            async def hot() -> bool:
                return await asyncio.to_thread(real_cpu) > 0.95

            await wait_for(hot, 60, interval=0.5, what="Prometheus to see the real node hot")

            async def operator_sees_it() -> bool:
                sample = runtime.scheduler.usage.caches["prometheus"].samples.get(REAL)
                return sample is not None and sample.cpu > 0.95

            await wait_for(operator_sees_it, 10, interval=0.2, what="loadwise to see it hot")
            # What the operator holds of the real node while it decides (for a failure's report).
            seen: list[tuple[float, float | None]] = []

            async def watch_sample() -> None:
                cache = runtime.scheduler.usage.caches["prometheus"]
                while True:
                    sample = cache.samples.get(REAL)
                    seen.append((time.time(), sample.cpu if sample is not None else None))
                    await asyncio.sleep(0.2)

            watcher = asyncio.create_task(watch_sample())
            try:
                for i in range(4):
                    await create_pod(rkube, rns, burner(f"new-{i}"))
                placed = await wait_bound(rkube, rns, [f"new-{i}" for i in range(4)])
            finally:
                watcher.cancel()
            assert set(placed.values()) == {"cool"}, placed
            # The real node fits every one of them by requests: only its real load kept them off,
            # and each decision says so.
            messages = [
                (await wait_event(rkube, rns, f"new-{i}", "Scheduled"))["message"] for i in range(4)
            ]
            real = await rkube.get(f"/api/v1/nodes/{REAL}")
            raw = 'node_cpu_seconds_total{mode="idle"}[10s]'
            series = (await asyncio.to_thread(prometheus.query, raw))["data"]["result"]
            cache = runtime.scheduler.usage.caches["prometheus"]
            why = (
                messages,
                seen,
                {n: (s.cpu, s.timestamp, s.covers_until) for n, s in cache.samples.items()},
                series,
                real["spec"].get("taints"),
            )
            assert all("1 hot node(s) passed over" in m for m in messages), why
            # The burners' usage, learned from the kubelet's real cAdvisor series: what they
            # use (most of a core each, the machine being saturated), not what they request.
            series = f'container_cpu_usage_seconds_total{{node="{REAL}",namespace="{rns}"}}'
            answer = await asyncio.to_thread(prometheus.query, series)
            assert answer["data"]["result"], "Prometheus has no cAdvisor series of the burners"
            (replicaset,) = await rkube.list(
                f"/apis/apps/v1/namespaces/{rns}/replicasets", labelSelector="app=burn"
            )
            workload = f"{rns}/ReplicaSet/{replicaset['metadata']['name']}"
            learned = runtime.scheduler.usage.caches["prometheus"].learned

            async def burners_learned() -> tuple[int, int] | None:
                return learned.estimate(workload)

            cpu, memory = await wait_for(
                burners_learned, 30, interval=0.5, what=f"{workload}'s use learned from cAdvisor"
            )
            assert cpu >= 300, (cpu, "millicores: the burners request 100m and use a core each")
            assert memory > 0, memory
    finally:
        with contextlib.suppress(KubeError):
            await rkube.delete(f"{POLICIES}/real")
        for i in range(4):  # on the simulated node: no kubelet finishes their deletion
            with contextlib.suppress(KubeError):
                await rkube.delete_pod_now(rns, f"new-{i}")
        await rkube.delete("/api/v1/nodes/cool")
        real_cluster.exporter.remove("cool")


async def test_a_preemption_victim_terminates_through_the_kubelet_and_the_preemptor_runs(
    rkube: Kube, real_cluster: LocalCluster, rns: str
) -> None:
    for name, value in (("rlow", 10), ("rhigh", 1000)):
        with contextlib.suppress(KubeError):
            await rkube.create(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": name}, "value": value},
            )  # fmt: skip
    node = await rkube.get(f"/api/v1/nodes/{REAL}")
    allocatable = int(node["status"]["allocatable"]["cpu"]) * 1000
    async with loadwise(real_cluster):
        victim = burner("victim", cpu=f"{allocatable - 300}m", priority_class="rlow")
        await create_pod(rkube, rns, victim)
        await wait_running(rkube, rns, "victim")
        uid = (await rkube.get(f"/api/v1/namespaces/{rns}/pods/victim"))["metadata"]["uid"]
        preemptor = burner("preemptor", cpu="1", priority_class="rhigh")
        await create_pod(rkube, rns, preemptor)

        async def victim_gone() -> bool:
            pods = await rkube.list(f"/api/v1/namespaces/{rns}/pods")
            return all(p["metadata"]["uid"] != uid for p in pods)

        # Graceful: nobody force-deletes; the kubelet stops the container and the pod goes.
        await wait_for(victim_gone, 60, interval=0.5, what="the victim terminated by the kubelet")
        pod = await wait_running(rkube, rns, "preemptor")
        assert pod["spec"]["nodeName"] == REAL
        await wait_event(rkube, rns, "preemptor", "Preempting")


def test_stopping_a_real_node_leaves_nothing_behind(real_cluster: LocalCluster) -> None:
    """Kill containers, stop kubelet and containerd, unmount, remove cgroups (tested here on a
    node of its own, with a pod running when it stops)."""
    cp = real_cluster.cp
    node = RealNode("real-teardown", cp, images=real_cluster.real_nodes[0].images)
    try:
        node.start()
        node.wait_ready()
        body = burner("held", millicpu=100)
        body["metadata"]["namespace"] = "default"
        body["spec"]["nodeName"] = node.name
        cp.api("POST", "/api/v1/namespaces/default/pods", body)

        def running() -> bool:
            pod = cp.api("GET", "/api/v1/namespaces/default/pods/held") or {}
            return pod.get("status", {}).get("phase") == "Running"

        node._wait(running, 60, "the pod Running on the node being stopped")
        assert node._mounts(), "a running pod has mounts under the node's directory"
    finally:
        node.stop()
        with contextlib.suppress(Exception):
            cp.api("DELETE", "/api/v1/namespaces/default/pods/held?gracePeriodSeconds=0")
            cp.api("DELETE", f"/api/v1/nodes/{node.name}")
    assert node.leftovers() == []


# --- the real metrics-server ---------------------------------------------------------------
@pytest.fixture(scope="module")
async def metrics_server(rkube: Kube, real_cluster: LocalCluster) -> AsyncIterator[MetricsServer]:
    server = MetricsServer(real_cluster.cp).start()
    await server.register(rkube)

    async def served() -> bool:
        try:
            await rkube.get(f"/apis/metrics.k8s.io/v1beta1/nodes/{REAL}")
            return True
        except KubeError:
            return False

    try:
        await wait_for(served, 90, interval=1.0, what="NodeMetrics of the real node")
        yield server
    finally:
        await server.unregister(rkube)
        server.stop()


async def test_kubectl_top_and_loadwise_read_the_real_metrics_server_alike(
    rkube: Kube, real_cluster: LocalCluster, rns: str, metrics_server: MetricsServer
) -> None:
    await rkube.create(
        POLICIES, manifests.policy("ms", cpu=1, memory=0, metrics={"source": "metrics-server"})
    )
    try:
        async with loadwise(real_cluster, metrics_sources=("metrics-server",)) as runtime:
            await create_pod(rkube, rns, burner("topped", millicpu=300))
            await wait_running(rkube, rns, "topped")

            async def pod_metrics() -> bool:
                path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{rns}/pods/topped"
                return await rkube.exists(path)

            await wait_for(pod_metrics, 60, interval=1.0, what="PodMetrics of the burner")
            top_pod = kubectl(real_cluster, "top", "pod", "-n", rns, "topped", "--no-headers")
            assert top_pod.returncode == 0, top_pod.stderr
            millicores = int(top_pod.stdout.split()[1].rstrip("m"))
            assert 150 <= millicores <= 450, top_pod.stdout  # it burns 300m
            cache = runtime.scheduler.usage.caches["metrics-server"]

            async def sampled() -> bool:
                return REAL in cache.samples

            await wait_for(sampled, 30, interval=0.5, what="loadwise's metrics-server sample")
            # kubectl top works for the real node...
            top = kubectl(real_cluster, "top", "node", REAL, "--no-headers")
            assert top.returncode == 0 and REAL in top.stdout, top.stderr
            # ...and loadwise reads the same NodeMetrics: for one metrics window (the object's
            # timestamp unchanged around a refresh), the same CPU share of allocatable.
            node = await rkube.get(f"/api/v1/nodes/{REAL}")
            allocatable = to_amount("cpu", node["status"]["allocatable"]["cpu"])
            path = f"/apis/metrics.k8s.io/v1beta1/nodes/{REAL}"

            async def same_window() -> tuple[float, float] | None:
                before = await rkube.get(path)
                await runtime.upkeep.refresh_metrics()
                after = await rkube.get(path)
                sample = cache.samples[REAL]
                stamp = datetime.fromisoformat(after["timestamp"].replace("Z", "+00:00"))
                if (
                    before["timestamp"] != after["timestamp"]
                    or sample.timestamp != stamp.timestamp()
                ):
                    return None  # not one window on both sides yet: try again
                return to_amount("cpu", after["usage"]["cpu"]) / allocatable, sample.cpu

            share, sampled_cpu = await wait_for(same_window, 30, interval=1.0, what="a window")
            assert abs(sampled_cpu - share) <= 0.01, (share, cache.samples)
    finally:
        await rkube.delete(f"{POLICIES}/ms")


# --- the Prometheus stacks users run ----------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
async def test_each_stacks_preset_reads_the_real_exporters_as_that_stack_labels_them(
    rkube: Kube, real_cluster: LocalCluster, rns: str, stack: str
) -> None:
    """One setting per stack (LOADWISE_PROMETHEUS_PRESET, chart `metrics.preset`): the real
    node-exporter and the real kubelet's cAdvisor, scraped by a real Prometheus with the target
    labels that stack's ServiceMonitors give them, give loadwise the real node's usage, with a
    burner of half a core running there. The default preset fails on the other stacks' labels,
    naming the setting."""
    assert real_cluster.node_exporter is not None
    cp = real_cluster.cp
    body = burner("preset-burn", millicpu=500)
    body["spec"]["nodeName"] = REAL  # no scheduler needed
    await create_pod(rkube, rns, body)
    await wait_running(rkube, rns, "preset-burn")
    jobs = stack_scrape_configs(cp, [REAL], real_cluster.node_exporter, stack)
    # The rate window and lag follow the interval Prometheus reports for the series read: the
    # `prometheus` chart scrapes every minute (20 s here, to keep the test short; the window
    # must still be longer than a minute), kube-prometheus-stack's cAdvisor every 10 s.
    if stack == "node-exporter":
        jobs[0]["scrape_interval"] = "20s"
    window, lag = {"node-exporter": (80, 100), "kube-prometheus": (60, 62)}.get(stack, (60, 70))
    prometheus = Prometheus([], "2s", jobs, cp.with_hosts()).start()
    try:
        config = Config.from_env(
            {"LOADWISE_PROMETHEUS_URL": prometheus.url, "LOADWISE_PROMETHEUS_PRESET": stack}
        )

        def source(config: Config) -> PrometheusSource:
            return PrometheusSource(
                config.sources.prometheus, config.metrics.lag, lambda: {REAL, "elsewhere"}
            )

        preset = source(config)
        preset.retry_discovery = 1.0  # until Prometheus has scraped (and knows) the targets
        try:
            seen: list[NodeSample | PrometheusError | None] = []

            async def sample() -> NodeSample | None:
                try:
                    found = (await preset.fetch()).get(REAL)
                except PrometheusError as error:
                    seen.append(error)
                    return None
                seen.append(found)
                # Half a core of the machine's two is a quarter, but the burner's duty cycle
                # follows the wall clock, so on a machine this busy (control plane, kubelet,
                # Prometheus, the test) it gets less, and a cAdvisor preset counts containers
                # only: one CI run timed out waiting for a fifth (what it read was not kept; it
                # is now, in the failure). A tenth is still far above idle containers.
                return found if found is not None and found.cpu > 0.1 else None

            try:
                found = await wait_for(sample, 90, interval=1.0, what=f"a {stack} sample of {REAL}")
            except TimeoutError as error:
                raise AssertionError(f"last read: {seen[-3:]}") from error
            assert found.cpu <= 1.0 and 0.0 < found.memory < 1.0, found
            await preset.fetch()
            assert (preset.window, preset.lag) == (window, lag), preset.intervals
        finally:
            await preset.close()
        if stack != "node-exporter":
            default = source(Config.from_env({"LOADWISE_PROMETHEUS_URL": prometheus.url}))
            try:
                with pytest.raises(PrometheusError, match="LOADWISE_PROMETHEUS_PRESET") as caught:
                    await default.fetch()
                # ... and which preset fits, from one raw series' labels
                fits = {
                    "kube-prometheus": "its `instance` is the node's name: preset kube-prometheus",
                    "kube-prometheus-stack": "names a node: preset kube-prometheus-stack",
                }[stack]
                assert fits in str(caught.value), str(caught.value)
            finally:
                await default.close()
    finally:
        prometheus.stop()
