"""e2e: the image `make image` builds (hack/build-image, reusing its cached base and layers) runs
as the chart runs it and schedules a pod.

podman runs it on the host network against the test control plane, with what the chart's pod
gets: the settings its Deployment renders, the chart ServiceAccount's token, CA and namespace
mounted read-only where a kubelet mounts them (the in-cluster login, no kubeconfig), a
read-only root filesystem with only a small tmpfs at /tmp (the chart's emptyDir), every
capability dropped, no new privileges, and the image's own user and entrypoint (no --user, no
command). The test then proves, rather than assumes: the process is `loadwise run` as uid 10001
with no capabilities, nothing outside /tmp can be written even by root, the startup probe's
/healthz answers over HTTPS, the pod is bound by this container (it holds the Lease), and
SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.controlplane import free_port
from loadwise_dev.kube import Kube

from .test_chart import NAMESPACE, RELEASE, get, helm, install
from .util import wait_bound, wait_event

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
# As hack/build-image runs it: crun fails on this machine kind's cgroups, the default ulimits
# need a capability the sandbox lacks, journald may be absent.
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", "--events-backend=file"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
UID = "10001"


def podman_unavailable() -> str | None:
    missing = [t for t in ("podman", "runc", "mmdebstrap") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (hack/ensure-tools installs them)"
    if os.geteuid() != 0:
        return "needs root (mmdebstrap, podman's system store)"
    return None


async def run(*args: str, check: bool = True) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    rc = process.returncode
    assert rc is not None
    if check:
        assert rc == 0, f"{' '.join(args[:6])}... exited {rc}: {err.decode()[-3000:]}"
    return rc, out.decode(), err.decode()


async def podman(*args: str, check: bool = True) -> tuple[int, str, str]:
    return await run(*PODMAN, *args, check=check)


async def build_image() -> str:
    """The image reference, from the same script `make image` runs (cached base and layers)."""
    started = time.monotonic()
    _, out, err = await run(str(REPO / "hack" / "build-image"), "--no-save")
    print(err, f"test_image: hack/build-image took {time.monotonic() - started:.1f} s", sep="")
    return out.split()[-1]


def service_account_files(directory: Path, token: str, ca: bytes) -> Path:
    """What a kubelet mounts for the pod's ServiceAccount, readable by the image's user."""
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)  # whatever the umask
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca)
    (directory / "namespace").write_text(NAMESPACE)
    for name in ("token", "ca.crt", "namespace"):
        (directory / name).chmod(0o644)
    return directory


@pytest.mark.timeout(900)  # a cold build (base by mmdebstrap, dependencies from PyPI) included
async def test_image_runs_as_the_chart_runs_it_and_schedules(
    kube: Kube, local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    reason = podman_unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the image test must run in CI: {reason}")
        pytest.skip(reason)
    image = await build_image()

    # The image's own metadata: what a Deployment without command or securityContext.runAsUser
    # would run.
    _, out, _ = await podman(
        "image", "inspect", "--format",
        "{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{.Config.User}}", image,
    )  # fmt: skip
    assert out.split() == ['["loadwise"]', '["run"]', f"{UID}:{UID}"]
    # The device allocator ships in the image, on the PATH loadwise finds it by, and answers.
    ping = 'echo \'{"id":1,"op":"ping"}\' | dra-allocator && command -v dra-allocator'
    _, out, _ = await podman(
        "run", "--rm", *LIMITS, "--network", "none", "--entrypoint", "/bin/sh", image, "-c", ping
    )
    assert out.split() == ['{"id":1}', "/opt/loadwise/bin/dra-allocator"], out

    await local_cluster.add_node(kube, "n1", cpu_usage=0.7)
    await local_cluster.add_node(kube, "n2", cpu_usage=0.2)
    await local_cluster.wait_metrics({"n1": 0.7, "n2": 0.2})
    await install(local_cluster, "replicas=1")
    container = f"loadwise-image-test-{os.getpid()}"
    try:
        deployment = await kube.get(
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-loadwise"
        )
        spec = deployment["spec"]["template"]["spec"]
        (rendered,) = spec["containers"]
        token = await kube.create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{spec['serviceAccountName']}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        secrets = service_account_files(
            tmp_path / "serviceaccount",
            token["status"]["token"],
            local_cluster.cp.ca_file.read_bytes(),
        )
        api = urlsplit(local_cluster.cp.server)
        secure_port = free_port()
        cpu_query = local_cluster.operator_config().sources.prometheus.cpu_query
        env: dict[str, str] = {e["name"]: e["value"] for e in rendered["env"] if "value" in e}
        env.update(
            {
                # What a kubelet sets for a pod: the in-cluster login.
                "KUBERNETES_SERVICE_HOST": str(api.hostname),
                "KUBERNETES_SERVICE_PORT": str(api.port),
                # The Downward API's fields.
                "LOADWISE_POD_NAME": container,
                "LOADWISE_POD_NAMESPACE": NAMESPACE,
                # Host network: loopback and a free port instead of the pod's own address.
                "LOADWISE_HTTP_HOST": "127.0.0.1",
                "LOADWISE_SECURE_PORT": str(secure_port),
                # The simulation's CPU window and a 1 s refresh, as every cluster test.
                "LOADWISE_PROMETHEUS_CPU_QUERY": cpu_query,
                "LOADWISE_METRICS_INTERVAL": "1",
                # For the start-up prefetch's lines (checked below).
                "LOADWISE_LOG_LEVEL": "DEBUG",
            }
        )
        await podman(
            "run", "--detach", "--name", container, "--network", "host", *LIMITS,
            "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=1m,mode=1777",
            "--cap-drop", "all", "--security-opt", "no-new-privileges",
            "--volume", f"{secrets}:{SERVICE_ACCOUNT_DIR}:ro",
            *(a for k, v in env.items() for a in ("--env", f"{k}={v}")),
            image,
        )  # fmt: skip
        try:
            await check_container(kube, ns, container, secure_port)
        except BaseException:
            _, logs, errors = await podman("logs", container, check=False)
            print(f"--- {container} logs ---\n{logs}{errors}")
            raise
        finally:
            await podman("rm", "--force", "--time", "0", container, check=False)
    finally:
        await helm(
            local_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False
        )


async def check_container(kube: Kube, ns: str, container: str, secure_port: int) -> None:
    async def healthy() -> bool:
        try:
            status, _ = await get(f"https://127.0.0.1:{secure_port}/healthz")
        except OSError:
            return False
        return status == 200

    await wait_for(healthy, 60, interval=0.5, what="the container's /healthz over HTTPS")

    # PID 1 is the entrypoint's `loadwise run`, as uid and gid 10001, with no capability.
    _, cmdline, _ = await podman("exec", container, "cat", "/proc/1/cmdline")
    argv = cmdline.split("\0")
    assert argv[-3:] == ["/opt/loadwise/bin/loadwise", "run", ""], argv
    _, status, _ = await podman("exec", container, "cat", "/proc/1/status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["Uid"].split() == [UID] * 4
    assert fields["Gid"].split() == [UID] * 4
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    _, uid, _ = await podman("exec", container, "id", "-u")
    assert uid.strip() == UID

    # The root filesystem is read-only even for root; /tmp (the chart's emptyDir) is not.
    _, inspected, _ = await podman(
        "container", "inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", container
    )
    assert inspected.strip() == "true"
    for user, path in (("0", "/probe"), ("0", "/opt/loadwise/probe"), (UID, "/var/tmp/probe")):
        rc, _, err = await podman("exec", "--user", user, container, "touch", path, check=False)
        assert rc != 0 and "Read-only file system" in err, (user, path, rc, err)
    await podman("exec", container, "sh", "-c", "echo ok > /tmp/probe && rm /tmp/probe")

    # It schedules: the pod goes to the cooler node, bound by this container (it leads).
    await kube.create(f"/api/v1/namespaces/{ns}/pods", manifests.pod("image-pod", namespace=ns))
    assert (await wait_bound(kube, ns, ["image-pod"], timeout=60))["image-pod"] == "n2"
    scheduled: Any = await wait_event(kube, ns, "image-pod", "Scheduled")
    assert "n2" in scheduled["message"]
    lease = await kube.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{RELEASE}-loadwise"
    )
    assert lease["spec"]["holderIdentity"] == container

    # SIGTERM (what the kubelet sends) ends it cleanly, well within the chart's 30 s grace.
    started = time.monotonic()
    await podman("stop", "--time", "30", container)
    stopped_in = time.monotonic() - started
    _, code, _ = await podman("container", "inspect", "--format", "{{.State.ExitCode}}", container)
    assert code.strip() == "0", code
    assert stopped_in < 20, f"took {stopped_in:.1f} s to stop"
    # And it ran without an error: kopf's own requests reached the API server too (its
    # service-account login used to go to https://kubernetes.default.svc, which the host network
    # cannot resolve, and logged an ERROR per attempt).
    _, out, err = await podman("logs", container)
    errors = [line for line in (out + err).splitlines() if " ERROR " in line or '"ERROR"' in line]
    assert not errors, "\n".join(errors)
    # The start-up lists came from the prefetch's children, made with the service account.
    for kind in ("pods", "nodes"):
        assert f"list of /api/v1/{kind} read from its start-up prefetch" in out + err
