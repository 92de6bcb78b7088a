"""The real descheduler (sigs.k8s.io/descheduler, built by hack/ensure-tools) for bench/rebalance,
run as its users run it against their Prometheus: LowNodeUtilization (the balance plugin) on
actual utilisation from Prometheus (`metricsProviders`, `metricsUtilization.source:
Prometheus`), its default evictor and limits (none), evicting through the Eviction API so
budgets hold, every `interval` seconds; kube-scheduler places the replacements.

Two things its Prometheus client needs that a process outside a pod does not have (v0.36.0,
pkg/descheduler/client): a CA file at the service account's path, read even for plain http, and
a token, taken from a Secret (`authToken.secretReference`) when not in a pod. So it runs in a
mount namespace of its own (`unshare --mount`, root) with a private /run holding the control
plane's CA there, and the Secret holds a placeholder token the loopback Prometheus ignores.

Its evictions are read back from the events it posts on each evicted pod (events.k8s.io,
action Descheduled: "pod eviction from NODE node by sigs.k8s.io/descheduler"), with the pod's
workload from a snapshot of the namespace's pods taken every half second.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from .controlplane import _cache, pinned_versions
from .engines.drift import Eviction
from .kube import Kube, KubeError

SECRET_NS, SECRET = "kube-system", "descheduler-prometheus"
ACCOUNT = "/run/secrets/kubernetes.io/serviceaccount"
NOTE = re.compile(r"^pod eviction from (\S+) node by sigs\.k8s\.io/descheduler$")


def descheduler_binary() -> Path:
    version = pinned_versions()["DESCHEDULER_VERSION"]
    return _cache() / "bin" / f"descheduler-{version}" / "descheduler"


def policy(url: str, query: str, low: int, target: int) -> dict[str, Any]:
    """LowNodeUtilization on Prometheus' node CPU (0..1 per node, label instance = node)."""
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "metricsProviders": [{
            "source": "Prometheus",
            "prometheus": {
                "url": url,
                "authToken": {"secretReference": {"namespace": SECRET_NS, "name": SECRET}},
            },
        }],
        "profiles": [{
            "name": "bench",
            "pluginConfig": [
                {"name": "DefaultEvictor", "args": {}},
                {"name": "LowNodeUtilization", "args": {
                    "thresholds": {"MetricResource": low},
                    "targetThresholds": {"MetricResource": target},
                    "metricsUtilization": {"source": "Prometheus", "prometheus": {"query": query}},
                }},
            ],
            "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}},
        }],
    }  # fmt: skip


class RealDescheduler:
    def __init__(
        self,
        cluster: Any,
        kube: Kube,
        ns: str,
        low: float = 0.5,
        target: float = 0.8,
        interval: float = 5.0,
    ) -> None:
        self.cluster, self.kube, self.ns = cluster, kube, ns
        self.low, self.target, self.interval = low, target, interval
        self.evictions: list[Eviction] = []
        self._pods: dict[str, tuple[str, str]] = {}  # uid -> (owner uid, workload)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        cp, prometheus = self.cluster.cp, self.cluster.prometheus
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": SECRET_NS},
            "stringData": {"prometheusAuthToken": "unused-on-loopback"},
        }
        with contextlib.suppress(KubeError):
            await self.kube.create(f"/api/v1/namespaces/{SECRET_NS}/secrets", secret)
        # Prometheus' answer as the descheduler wants it: the node name in `instance`, 0..1.
        named = f'label_replace({self.cluster.cpu_query}, "instance", "$1", "node", "(.*)")'
        query = f"clamp_max({named}, 1)"
        config = cp.workdir / "descheduler-policy.yaml"
        low, target = round(self.low * 100), round(self.target * 100)
        config.write_text(yaml.safe_dump(policy(prometheus.url, query, low, target)))
        command = [
            str(descheduler_binary()),
            f"--client-connection-kubeconfig={cp.kubeconfig}",
            f"--policy-config-file={config}",
            f"--descheduling-interval={self.interval:g}s",
            "--secure-port=0",  # no HTTPS (metrics) port at all
            "--bind-address=127.0.0.1",
            "--v=2",
        ]
        script = (
            f"mount -t tmpfs tmpfs /run && mkdir -p {ACCOUNT} && "
            f"cp {shlex.quote(str(cp.ca_file))} {ACCOUNT}/ca.crt && exec {shlex.join(command)}"
        )
        cp._spawn("descheduler", ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                  script])  # fmt: skip
        self._task = asyncio.create_task(self._snapshot())

    async def _snapshot(self) -> None:
        while True:
            with contextlib.suppress(KubeError):
                for pod in await self.kube.list(f"/api/v1/namespaces/{self.ns}/pods"):
                    meta = pod["metadata"]
                    owner = next(
                        (o for o in meta.get("ownerReferences") or () if o.get("controller")), None
                    )
                    if owner is not None:
                        job = (meta.get("labels") or {}).get("job", owner["name"])
                        self._pods[meta["uid"]] = (owner["uid"], job)
            await asyncio.sleep(0.5)

    async def stop(self) -> list[Eviction]:
        """Stop it; its evictions, from its events."""
        self.cluster.cp.stop_process("descheduler")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        events = await self.kube.list(f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events")
        out = []
        for event in events:
            found = NOTE.match(event.get("note") or "")
            regarding = event.get("regarding") or {}
            known = self._pods.get(regarding.get("uid", ""))
            if event.get("action") != "Descheduled" or found is None or known is None:
                continue
            at = event.get("eventTime") or ""
            with contextlib.suppress(ValueError):
                stamp = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
                out.append(Eviction(regarding["uid"], known[0], known[1], found[1], stamp))
        self.evictions = sorted(out, key=lambda e: e.at)
        return self.evictions

    def log(self) -> str:
        path = self.cluster.cp.workdir / "descheduler.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""
