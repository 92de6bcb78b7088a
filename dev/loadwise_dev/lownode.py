"""A faithful small simulation of the descheduler's LowNodeUtilization with real metrics
(kubernetes-sigs/descheduler, pkg/framework/plugins/nodeutilization, `metricsUtilization`),
for bench/rebalance's baseline.

Each cycle: nodes whose measured CPU is above `target` (targetThresholds) are overutilised,
those below `low` (thresholds) underutilised; with no underutilised node nothing is evicted
(the plugin's "no node is underutilized" stop). From each overutilised node it evicts through
the Eviction API (budgets hold) one pod per cycle, the issue's shape of it: the first evictable
pod by priority (lowest first), then QoS class (BestEffort, Burstable, Guaranteed); evictable
means owned by a controller other than a DaemonSet, running, not terminating, no local storage.
The replacement is then placed by whatever scheduler the pods name (kube-scheduler here: by
requests), which is the failure this compares with: it does not know why the pod left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from .engines.drift import Eviction
from .kube import Kube, KubeError

log = logging.getLogger(__name__)
QOS = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}


def evictable(pod: dict[str, Any]) -> bool:
    meta, spec = pod["metadata"], pod["spec"]
    owners = [o for o in meta.get("ownerReferences") or () if o.get("controller")]
    if not owners or owners[0]["kind"] == "DaemonSet" or meta.get("deletionTimestamp"):
        return False
    if pod["status"].get("phase") != "Running":
        return False
    return not any("emptyDir" in v or "hostPath" in v for v in spec.get("volumes") or ())


def victims(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In the descheduler's order: lowest priority first, then the least guaranteed QoS."""
    return sorted(
        (p for p in pods if evictable(p)),
        key=lambda p: (
            p["spec"].get("priority") or 0,
            QOS.get(p["status"].get("qosClass", "Burstable"), 1),
        ),
    )


class LowNodeUtilization:
    def __init__(
        self,
        kube: Kube,
        ns: str,
        usage: Callable[[], dict[str, float]],
        target: float = 0.8,
        low: float = 0.5,
        interval: float = 5.0,
    ) -> None:
        self.kube = kube
        self.ns = ns
        self.usage = usage  # node -> measured CPU utilisation (the metrics it reads)
        self.target = target
        self.low = low
        self.interval = interval
        self.evictions: list[Eviction] = []

    async def run(self) -> None:
        while True:
            try:
                await self.cycle()
            except Exception:  # a failed cycle: the next one, as the descheduler does
                log.exception("descheduler-like cycle failed")
            await asyncio.sleep(self.interval)

    async def cycle(self) -> None:
        measured = await asyncio.to_thread(self.usage)
        over = sorted(n for n, cpu in measured.items() if cpu > self.target)
        if not over or not any(cpu < self.low for cpu in measured.values()):
            return
        pods = await self.kube.list(f"/api/v1/namespaces/{self.ns}/pods")
        for node in over:
            for pod in victims([p for p in pods if p["spec"].get("nodeName") == node]):
                if await self._evict(pod, node):
                    break

    async def _evict(self, pod: dict[str, Any], node: str) -> bool:
        meta = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": self.ns},
        }
        try:
            await self.kube.create(
                f"/api/v1/namespaces/{self.ns}/pods/{meta['name']}/eviction", body
            )
        except KubeError as exc:
            if exc.status in (404, 409, 429):  # gone, or its budget refuses: the next pod
                return False
            raise
        owner = next(o for o in meta["ownerReferences"] if o.get("controller"))
        job = meta.get("labels", {}).get("job", owner["name"])
        self.evictions.append(Eviction(meta["uid"], owner["uid"], job, node, time.time()))
        return True
