"""Simulated pod usage: pods declare what they really use in annotations, and a watch feeds the
exporter, so the node and per-pod usage Prometheus scrapes follows placement (with the real
scrape lag)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from loadwise.resources import to_amount

from .exporter import UsageExporter
from .kube import Kube
from .kwok import USAGE_CPU, USAGE_MEMORY

CPU_ANNOTATION = "sim.loadwise.io/cpu"
MEMORY_ANNOTATION = "sim.loadwise.io/memory"


def usage_annotations(cpu: str, memory: str) -> dict[str, str]:
    """What a pod uses, for whichever simulates usage: the feeder below, or KWOK on its nodes
    (kwok_usage.py)."""
    return {CPU_ANNOTATION: cpu, MEMORY_ANNOTATION: memory, USAGE_CPU: cpu, USAGE_MEMORY: memory}


def declared_usage(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if CPU_ANNOTATION not in annotations:
        return None
    return (
        to_amount("cpu", annotations[CPU_ANNOTATION]),
        to_amount("memory", annotations.get(MEMORY_ANNOTATION, "0")),
    )


class UsageFeeder:
    """Watches all pods; bound pods with declared usage load their node in the exporter."""

    def __init__(self, kube: Kube, exporter: UsageExporter) -> None:
        self.kube = kube
        self.exporter = exporter
        self._task: asyncio.Task[None] | None = None

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        node = (pod.get("spec") or {}).get("nodeName")
        usage = declared_usage(pod)
        if event_type == "DELETED" or not node or usage is None:
            self.exporter.remove_pod(uid)
        else:
            self.exporter.place_pod(
                uid, node, *usage, namespace=meta.get("namespace", ""), name=meta.get("name", "")
            )

    async def start(self) -> None:
        version = await self._relist()
        self._task = asyncio.create_task(self._run(version))

    async def _relist(self) -> str:
        """Sync with a fresh list (and forget pods that vanished meanwhile)."""
        page = await self.kube.get("/api/v1/pods")
        seen = set()
        for pod in page.get("items") or ():
            self.apply("ADDED", pod)
            seen.add(pod["metadata"]["uid"])
        self.exporter.keep_only(seen)
        return str(page["metadata"]["resourceVersion"])

    async def _run(self, version: str) -> None:
        # Like an informer: the API server ends watches (timeouts, slow consumers); relist.
        while True:
            await self._watch(version)
            version = await self._relist()

    async def _watch(self, version: str) -> None:
        params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "3600"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.kube.session.get(
            self.kube.server + "/api/v1/pods", params=params, timeout=timeout
        ) as resp:
            while line := await resp.content.readline():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self.apply(event["type"], event["object"])
                elif event.get("type") == "ERROR":  # e.g. 410 Gone: relist
                    return

    def check(self) -> None:
        """Raise what killed the watch, if it died."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
