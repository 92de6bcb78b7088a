"""The real metrics-server (v0.8.0, built from its Go module by hack/ensure-tools) behind the
real API server's aggregation layer, for real nodes (realnode.py) and KWOK's.

It scrapes each kubelet's /metrics/resource at the node's first address of InternalIP, Hostname
and its status port, verifying the serving certificate with the control plane's CA and
presenting the API server's kubelet client certificate; it authenticates the aggregator's
requests by the front-proxy CA. A real node publishes only its Hostname (resolved to 127.0.0.1
in the control plane's hosts namespace; its certificate names it). KWOK's nodes (kwok.py,
metrics=True) have InternalIP 127.0.0.1 and the path in their
`metrics.k8s.io/resource-metrics-path` annotation; KWOK serves them with the API server's
certificate, which names 127.0.0.1. So one metrics-server serves both kinds, as on a cluster with
a real and a KWOK pool. Node objects without any kubelet have nothing to scrape: metrics-server
logs them as failures and serves the others. The Service is an ExternalName pointing at
localhost (Endpoints may not hold loopback addresses).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .controlplane import ControlPlane, _cache, free_port, pinned_versions, terminate
from .kube import Kube, KubeError

SERVICE = "metrics-server"
API_SERVICE = "v1beta1.metrics.k8s.io"


async def register_metrics_api(kube: Kube, service: str, port: int) -> None:
    """An ExternalName Service for localhost:`port` and the APIService `v1beta1.metrics.k8s.io`
    on it, so kube-apiserver's aggregator proxies metrics.k8s.io there."""
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "namespace": "kube-system"},
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{"port": port, "protocol": "TCP"}],
        },
    }
    api_service: dict[str, Any] = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {
            "service": {"namespace": "kube-system", "name": service, "port": port},
            "group": "metrics.k8s.io",
            "version": "v1beta1",
            # As metrics-server's own manifests: its serving certificate is self-signed.
            "insecureSkipTLSVerify": True,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    for path, item in (
        ("/api/v1/namespaces/kube-system/services", body),
        ("/apis/apiregistration.k8s.io/v1/apiservices", api_service),
    ):
        try:
            await kube.create(path, item)
        except KubeError as exc:
            if exc.status != 409:
                raise


async def unregister_metrics_api(kube: Kube, service: str) -> None:
    for path in (
        f"/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}",
        f"/api/v1/namespaces/kube-system/services/{service}",
    ):
        try:
            await kube.delete(path)
        except KubeError as exc:
            if exc.status != 404:
                raise


def binary() -> Path:
    version = pinned_versions()["METRICS_SERVER_VERSION"]
    path = _cache() / "bin" / f"metrics-server-{version}" / "metrics-server"
    if not path.exists():
        raise FileNotFoundError(f"{path} missing: run hack/ensure-tools first")
    return path


class MetricsServer:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="loadwise-metrics-server-"))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MetricsServer:
        pki = self.cp.workdir / "pki"
        config = str(self.cp.kubeconfig)
        log = open(self.workdir / "metrics-server.log", "wb")  # noqa: SIM115 - with the process
        self.process = subprocess.Popen(
            [
                *self.cp.with_hosts(),
                str(binary()),
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={self.workdir}",
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--kubelet-use-node-status-port",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                "--metric-resolution=10s",
                "--kubelet-request-timeout=5s",  # shorter than the resolution (required)
                "--v=1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        return self

    def log(self) -> str:
        return (self.workdir / "metrics-server.log").read_text(errors="replace")

    async def register(self, kube: Kube) -> None:
        await register_metrics_api(kube, SERVICE, self.port)

    async def unregister(self, kube: Kube) -> None:
        await unregister_metrics_api(kube, SERVICE)

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
        if not os.environ.get("LOADWISE_KEEP_LOGS"):
            shutil.rmtree(self.workdir, ignore_errors=True)
