"""e2e: upgrading from the previous release, with policies in place, by the commands the docs
give (docs/operations.md, "Upgrades"; CHANGELOG.md, "Upgrading").

The previous release's chart and operator come from git (its tag's commit), on a control plane
of their own that has never seen this version's CRD: its `helm install` creates the CRD as a
user's first install does. Its operator runs as a process from that commit's code, with the
settings its chart renders and its ServiceAccount's token, and writes its policies' status.
Then the documented upgrade: the new CRD by server-side apply, `helm upgrade
--reset-then-reuse-values`, and this version's operator with the upgraded settings, which must
take the old objects as they are (status written by the old version included) and schedule
under the user's policy.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import AsyncIterator, Iterator
from io import BytesIO
from pathlib import Path

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.kube import Kube

from .conftest import POLICIES
from .test_chart import CHART_POLICY, NAMESPACE, RELEASE, charts_operator, helm, policy_ready
from .util import kubectl, wait_bound, wait_event

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
# The release upgraded from: tag v0.1.0. By commit, so a clone without tags has it too.
PREVIOUS_VERSION, PREVIOUS_COMMIT = "0.1.0", "bd62606cd70a39087e2a2a897d92737c4df1bb98"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's chart and operator package, from git."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS_COMMIT, "charts/loadwise", "operator"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, (
        f"v{PREVIOUS_VERSION} ({PREVIOUS_COMMIT}) is not in this clone: "
        f"{done.stderr.decode()}; the upgrade test needs the history (not a shallow clone)"
    )
    root = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as archive:
        archive.extractall(root, filter="data")
    return root


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A control plane without the CRD (the old chart's install brings it), with KWOK nodes."""
    cluster = LocalCluster(kwok_usage=True).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def ukube(cluster: LocalCluster) -> AsyncIterator[Kube]:
    async with cluster.kube() as client:
        yield client


async def test_upgrade_from_the_previous_release_with_policies_in_place(
    ukube: Kube, cluster: LocalCluster, previous: Path, tmp_path: Path
) -> None:
    assert cluster.prometheus is not None
    await cluster.add_node(ukube, "n1", cpu_usage=0.7)
    await cluster.add_node(ukube, "n2", cpu_usage=0.2)
    await cluster.wait_metrics({"n1": 0.7, "n2": 0.2})
    ns = "apps"
    await ukube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    await cluster.wait_namespace(ukube, ns)
    values = ["--set", f"metrics.prometheusUrl={cluster.prometheus.url}"]
    values += ["--set", "metrics.lagSeconds=6"]
    values += ["--set", "metrics.preset=kube-prometheus-stack"]  # KWOK's cAdvisor series
    await helm(
        cluster, "install", RELEASE, str(previous / "charts" / "loadwise"),
        "--namespace", NAMESPACE, "--create-namespace", *values,
    )  # fmt: skip
    crd = "schedulingpolicies.loadwise.io"
    await wait_for(
        lambda: ukube.exists(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"),
        30,
        what="the previous chart's CRD",
    )
    await wait_for(lambda: ukube.exists(f"{POLICIES}/default"), 30, what="the release's policy")
    user_policy = {
        "apiVersion": "loadwise.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": "web"},
        "spec": {
            "weights": {"cpu": 3, "memory": 1},
            "podSelector": {"matchLabels": {"app": "web"}},
            "hotThresholds": {"cpu": 85},
        },
    }
    await ukube.create(POLICIES, user_policy)

    # The previous release's operator, from its own code, as its chart configures it.
    config, sa_kubeconfig = await charts_operator(cluster, ukube, tmp_path)
    deployment = await ukube.get(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-loadwise"
    )
    rendered = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADWISE_")}
    env |= {e["name"]: e["value"] for e in rendered if "value" in e}
    env |= {
        "KUBECONFIG": str(sa_kubeconfig),
        "LOADWISE_SECURE_PORT": "0",  # as charts_operator: loopback, no fixed port
        "LOADWISE_HTTP_HOST": "127.0.0.1",
        "LOADWISE_PROMETHEUS_CPU_QUERY": config.sources.prometheus.cpu_query,
        "LOADWISE_METRICS_INTERVAL": "1",
    }
    log_path = tmp_path / "previous-operator.log"
    with log_path.open("wb") as log:
        old = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _RUN_FROM_PREVIOUS, str(previous / "operator"),
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            await ukube.create(
                f"/api/v1/namespaces/{ns}/pods",
                manifests.pod("before", namespace=ns, labels={"app": "web"}),
            )
            assert (await wait_bound(ukube, ns, ["before"], timeout=60))["before"] == "n2"
            scheduled = await wait_event(ukube, ns, "before", "Scheduled")
            assert scheduled["message"].endswith("; policy web")
            await wait_for(lambda: policy_ready(ukube, "web"), 30, what="web Ready (previous)")
            written = (await ukube.get(f"{POLICIES}/web"))["status"]
            assert "podsScheduled" in written  # a field this version no longer has
        finally:
            old.send_signal(signal.SIGTERM)  # as the kubelet stops it in a rollout
            try:
                await asyncio.wait_for(old.wait(), 30)
            except TimeoutError:
                old.kill()
                await old.wait()
    output = log_path.read_text()
    assert old.returncode == 0, output[-3000:]
    assert f"loadwise from {previous / 'operator'}" in output

    # The upgrade, as documented. Helm created the CRD (its fields are manager `helm`'s): a
    # server-side apply without --force-conflicts is refused, as the docs say.
    crds = str(REPO / "charts/loadwise/crds/")
    with pytest.raises(AssertionError, match='conflict with "helm"'):
        await kubectl(cluster.cp.kubeconfig, "apply", "--server-side", "-f", crds)
    await kubectl(cluster.cp.kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", crds)
    await helm(
        cluster, "upgrade", RELEASE, str(REPO / "charts" / "loadwise"),
        "--namespace", NAMESPACE, "--reset-then-reuse-values",
    )  # fmt: skip
    stored = await ukube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    columns = stored["spec"]["versions"][0]["additionalPrinterColumns"]
    assert "Pods" not in [c["name"] for c in columns]  # the new CRD is in place
    deployment = await ukube.get(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-loadwise"
    )
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(":" + _chart_version()), image

    config, sa_kubeconfig = await charts_operator(cluster, ukube, tmp_path)
    assert config.metrics.lag == 6 and config.sources.prometheus.url == cluster.prometheus.url
    async with running_operator(config, sa_kubeconfig):
        await ukube.create(
            f"/api/v1/namespaces/{ns}/pods",
            manifests.pod("after", namespace=ns, labels={"app": "web"}),
        )
        assert (await wait_bound(ukube, ns, ["after"], timeout=60))["after"] == "n2"
        assert (await wait_event(ukube, ns, "after", "Scheduled"))["message"].endswith(
            "; policy web"
        )
        await wait_for(lambda: policy_ready(ukube, "web"), 30, what="web Ready")
        # The release's fallback, renamed from `default` (0.1.0) to be release-scoped.
        await wait_for(lambda: policy_ready(ukube, CHART_POLICY), 30, what="fallback Ready")
        assert not await ukube.exists(f"{POLICIES}/default")

        async def pruned() -> bool:
            status = (await ukube.get(f"{POLICIES}/web"))["status"]
            return "podsScheduled" not in status and bool(status.get("lastMetricsRefresh"))

        await wait_for(pruned, 30, what="the old status field gone at the first write")
        web = await ukube.get(f"{POLICIES}/web")
        assert web["spec"]["weights"] == {"cpu": 3, "memory": 1}
        assert web["spec"]["hotThresholds"]["cpu"] == 85
    await helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")


# Runs `loadwise run` from the previous release's code: its directory first on sys.path, and
# the path of the package imported printed, so the test can tell it ran the old code.
_RUN_FROM_PREVIOUS = """
import sys
sys.path.insert(0, sys.argv[1])
import loadwise, loadwise.cli
print("loadwise from", loadwise.__file__, flush=True)
sys.exit(loadwise.cli.main(["run"]))
"""


def _chart_version() -> str:
    for line in (REPO / "charts/loadwise/Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError("no appVersion in Chart.yaml")
