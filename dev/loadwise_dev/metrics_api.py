"""A stand-in for metrics-server behind the real API server's aggregation layer.

Why a stand-in: metrics-server gets node usage by scraping each kubelet's /metrics/resource, and
no kubelet runs here. Everything between it and loadwise is real: an APIService registers
`v1beta1.metrics.k8s.io`, kube-apiserver's aggregator proxies `/apis/metrics.k8s.io/...` to this
server over TLS, and loadwise reads NodeMetrics through kube-apiserver as it would in a cluster.
The usage served is the simulation's ground truth (the UsageExporter's), like metrics-server's.
PodMetrics too, for the pods the exporter runs (each as one container), so per-pod usage and the
learning from it go through the same path.
The Service is an ExternalName pointing at localhost: Endpoints may not hold loopback addresses.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

from loadwise.policies.status import stamp

from .exporter import UsageExporter
from .httpserve import ThreadedServer
from .kube import Kube
from .metrics_server import register_metrics_api, unregister_metrics_api

GROUP_VERSION = "metrics.k8s.io/v1beta1"
WINDOW_SECONDS = 10
RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": GROUP_VERSION,
    "resources": [
        {
            "name": "nodes",
            "singularName": "",
            "namespaced": False,
            "kind": "NodeMetrics",
            "verbs": ["get", "list"],
        },
        {
            "name": "pods",
            "singularName": "",
            "namespaced": True,
            "kind": "PodMetrics",
            "verbs": ["get", "list"],
        },
    ],
}


class MetricsApiStandIn:
    def __init__(self, exporter: UsageExporter, cert: Path, key: Path) -> None:
        self.exporter = exporter
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(cert), str(key))
        self._http = ThreadedServer(self._respond, tls=tls)

    def _respond(self, path: str) -> tuple[int, str, bytes]:
        path = path.rstrip("/")
        if path == f"/apis/{GROUP_VERSION}":
            body: Any = RESOURCES
        elif path == f"/apis/{GROUP_VERSION}/nodes":
            body = self.node_metrics()
        elif path == f"/apis/{GROUP_VERSION}/pods":
            body = self.pod_metrics()
        elif path.startswith(f"/apis/{GROUP_VERSION}/namespaces/") and path.endswith("/pods"):
            body = self.pod_metrics(path.split("/")[5])
        else:
            not_found = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
            return 404, "application/json", json.dumps(not_found).encode()
        return 200, "application/json", json.dumps(body).encode()

    @property
    def port(self) -> int:
        return self._http.port

    def start(self) -> MetricsApiStandIn:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def node_metrics(self) -> dict[str, Any]:
        now = stamp()
        items = []
        for name, (cpu_millis, memory_bytes) in self.exporter.absolute_usage().items():
            items.append(
                {
                    "metadata": {"name": name, "creationTimestamp": now},
                    "timestamp": now,
                    "window": f"{WINDOW_SECONDS}s",
                    "usage": {"cpu": f"{cpu_millis}m", "memory": f"{memory_bytes // 1024}Ki"},
                }
            )
        return {
            "kind": "NodeMetricsList",
            "apiVersion": GROUP_VERSION,
            "metadata": {},
            "items": items,
        }

    def pod_metrics(self, namespace: str | None = None) -> dict[str, Any]:
        now = stamp()
        pods = sorted(self.exporter.pod_usage().items())
        items = [
            {
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": now},
                "timestamp": now,
                "window": f"{WINDOW_SECONDS}s",
                "containers": [
                    {"name": "main", "usage": {"cpu": f"{cpu}m", "memory": f"{memory // 1024}Ki"}}
                ],
            }
            for (ns, name), (cpu, memory) in pods
            if namespace is None or ns == namespace
        ]
        return {
            "kind": "PodMetricsList",
            "apiVersion": GROUP_VERSION,
            "metadata": {},
            "items": items,
        }

    async def register(self, kube: Kube) -> None:
        """ExternalName Service + APIService, so kube-apiserver proxies metrics.k8s.io here."""
        await register_metrics_api(kube, "metrics-standin", self.port)

    async def unregister(self, kube: Kube) -> None:
        await unregister_metrics_api(kube, "metrics-standin")
