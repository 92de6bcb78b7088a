"""Waiting and reading helpers for the cluster tests."""

from __future__ import annotations

from typing import Any

from loadwise_dev.cluster import wait_for
from loadwise_dev.kube import Kube


async def wait_bound(kube: Kube, ns: str, names: list[str], timeout: float = 30) -> dict[str, str]:
    """pod name -> node, once every named pod is bound."""

    async def bound() -> dict[str, str] | None:
        pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        if all(nodes.get(n) for n in names):
            return {n: nodes[n] for n in names}
        return None

    return await wait_for(bound, timeout, what=f"pods {names} bound")


async def events(
    kube: Kube, ns: str, pod: str | None = None, reason: str | None = None
) -> list[Any]:
    items = await kube.list(f"/api/v1/namespaces/{ns}/events")
    return [
        e
        for e in items
        if (pod is None or e["involvedObject"]["name"] == pod)
        and (reason is None or e["reason"] == reason)
    ]


async def wait_event(kube: Kube, ns: str, pod: str, reason: str, timeout: float = 30) -> Any:
    async def found() -> Any:
        matching = await events(kube, ns, pod, reason)
        return matching[0] if matching else None

    return await wait_for(found, timeout, what=f"{reason} event for {pod}")
