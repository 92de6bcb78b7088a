"""Simulated usage from KWOK's own objects, read through the real Prometheus.

What the harness's exporter (exporter.py) does by hand, done by the field's simulator: each pod
on a KWOK node uses what its `kwok.x-k8s.io/usage-cpu` / `-memory` annotations say (KWOK's
ClusterResourceUsage `usage-from-annotation`), KWOK integrates that into the kubelet's cAdvisor
series (our Metric `loadwise-cadvisor`, kwok.py), and Prometheus scrapes them as
kube-prometheus-stack's kubelet job labels them (`node`). loadwise reads them with that stack's
preset queries, their window shortened to the harness's 5 s (1 s scrapes).

A node's usage is its pods' (KWOK knows nothing else), so a node's background load is a pod:
one per node in BACKGROUND_NS, bound directly, requesting zero, using the background (what
other schedulers' and system pods use on a real node). Only a pod that KWOK has started counts:
KWOK's pod Stages start a pod 1-6 s after it is bound, as a kubelet takes a moment too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadwise.resources import to_amount
from loadwise.usage.prometheus_settings import PRESETS
from loadwise.usage.scrape_intervals import with_window

from . import manifests
from .kube import Kube, KubeError
from .kwok import USAGE_CPU, USAGE_MEMORY, Kwok

BACKGROUND_NS = "loadwise-background"
# kube-prometheus-stack's preset queries, with the harness's 5 s window (1 s scrapes).
_, _CPU, MEMORY_QUERY, _ = PRESETS["kube-prometheus-stack"]
CPU_QUERY = with_window(_CPU, 5)


def usage_annotations(cpu: str, memory: str) -> dict[str, str]:
    return {USAGE_CPU: cpu, USAGE_MEMORY: memory}


def declared(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(millicores, bytes) a pod uses under KWOK: its annotations, else KWOK's 1m and 1Mi."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return (
        to_amount("cpu", annotations.get(USAGE_CPU, "1m")),
        to_amount("memory", annotations.get(USAGE_MEMORY, "1Mi")),
    )


class KwokUsage:
    """The KWOK nodes whose usage Prometheus scrapes, their capacities and backgrounds."""

    def __init__(self, kwok: Kwok, workdir: Path) -> None:
        self.kwok = kwok
        self.targets = workdir / "kwok-cadvisor-targets.json"
        self.capacity: dict[str, tuple[int, int]] = {}  # node -> (millicores, bytes)
        self._write()

    def scrape_config(self) -> dict[str, Any]:
        """kube-prometheus-stack's kubelet cAdvisor job (kwok.py's), every second, with its
        nodes read from a file that `add` rewrites (Prometheus watches it)."""
        job = self.kwok.cadvisor_scrape_config([])
        del job["static_configs"]
        job["scrape_interval"] = "1s"
        job["file_sd_configs"] = [{"files": [str(self.targets)], "refresh_interval": "5s"}]
        return job

    def _write(self) -> None:
        groups = self.kwok.cadvisor_scrape_config(sorted(self.capacity))["static_configs"]
        partial = self.targets.with_suffix(".tmp")
        partial.write_text(json.dumps(groups))
        partial.replace(self.targets)  # whole, or Prometheus may read half a file

    async def add(self, kube: Kube, node: dict[str, Any], cpu: float, memory: float) -> None:
        """Scrape this KWOK node, and give it a background pod using `cpu` and `memory` (0..1
        of its capacity)."""
        name = node["metadata"]["name"]
        capacity = node["status"]["capacity"]
        millis, size = to_amount("cpu", capacity["cpu"]), to_amount("memory", capacity["memory"])
        await self._namespace(kube)
        body = manifests.pod(
            f"background-{name}",
            namespace=BACKGROUND_NS,
            annotations=self._background(cpu, memory, millis, size),
        )
        spec = body["spec"]
        spec["nodeName"] = name  # bound by whoever runs it, as a DaemonSet's pod is
        spec["tolerations"] = [{"operator": "Exists"}]
        # Zero, not absent: a container without requests counts as 100m and 200Mi placed
        # (kube-scheduler's non-zero defaults), and loadwise would add that estimate to the
        # node's measured load until the metrics lag has passed since KWOK started the pod,
        # though the background is measured from the start. It stands for load that was
        # already there, placed by no scheduler.
        spec["containers"][0]["resources"] = {"requests": {"cpu": "0", "memory": "0"}}
        try:
            await kube.create(f"/api/v1/namespaces/{BACKGROUND_NS}/pods", body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            await self._patch_background(kube, name, cpu, memory, millis, size)  # an earlier add's
        # Known only once its background runs: a failed add is tried again whole.
        self.capacity[name] = (millis, size)
        self._write()

    async def set_background(self, kube: Kube, name: str, cpu: float, memory: float) -> None:
        """A node's background use from now on (0..1 of its capacity): its background pod's
        annotations, which KWOK reads at every scrape."""
        await self._patch_background(kube, name, cpu, memory, *self.capacity[name])

    async def _patch_background(
        self, kube: Kube, name: str, cpu: float, memory: float, millis: int, size: int
    ) -> None:
        path = f"/api/v1/namespaces/{BACKGROUND_NS}/pods/background-{name}"
        body = {"metadata": {"annotations": self._background(cpu, memory, millis, size)}}
        await kube.merge_patch(path, body)

    async def set_pod(self, kube: Kube, pod: Mapping[str, Any], cpu: int, memory: int) -> None:
        """What a pod uses from now on (millicores, bytes), in its KWOK usage annotations; the
        UID pins the pod (a new pod of the same name is refused, not patched)."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        annotations = usage_annotations(f"{cpu}m", str(memory))
        await kube.merge_patch(path, {"metadata": {"uid": meta["uid"], "annotations": annotations}})

    async def forget(self, kube: Kube, name: str) -> None:
        """A node deleted: no longer scraped, and its background pod goes (no kubelet is left
        to finish a graceful deletion)."""
        self.remove(name)
        await kube.delete_pod_now(BACKGROUND_NS, f"background-{name}")  # a 404 is fine there

    @staticmethod
    def _background(cpu: float, memory: float, millis: int, size: int) -> dict[str, str]:
        return usage_annotations(
            f"{max(1, round(cpu * millis))}m", str(max(1 << 20, round(memory * size)))
        )

    def remove(self, name: str) -> None:
        if self.capacity.pop(name, None) is not None:
            self._write()

    async def truth(
        self, kube: Kube, capped: bool = True, started_only: bool = False
    ) -> dict[str, tuple[float, float]]:
        """Per node, (CPU, memory) utilisation from what its pods declare: what KWOK serves
        once every pod is started (`started_only`: what it serves now), without the metrics'
        lag. KWOK serves the sum even above capacity, where a real node is full (`capped`: at
        most 1, as the exporter's)."""
        top = 1.0 if capped else float("inf")
        used = {name: [0, 0] for name in self.capacity}
        for pod in await kube.list("/api/v1/pods"):
            node = pod["spec"].get("nodeName")
            started = not started_only or (pod.get("status") or {}).get("phase") == "Running"
            if node in used and started and not pod["metadata"].get("deletionTimestamp"):
                cpu, memory = declared(pod)
                used[node][0] += cpu
                used[node][1] += memory
        return {
            name: (
                min(top, cpu / self.capacity[name][0]),
                min(top, memory / self.capacity[name][1]),
            )
            for name, (cpu, memory) in used.items()
        }

    async def _namespace(self, kube: Kube) -> None:
        with contextlib.suppress(KubeError):  # 409: there already
            await kube.create("/api/v1/namespaces", {"metadata": {"name": BACKGROUND_NS}})
        with contextlib.suppress(KubeError):  # pods need it; a controller-manager may be first
            await kube.create(
                f"/api/v1/namespaces/{BACKGROUND_NS}/serviceaccounts",
                {"metadata": {"name": "default"}},
            )
