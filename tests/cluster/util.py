"""Waiting and reading helpers for the cluster tests."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loadwise.runtime import Runtime
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.controlplane import k8s_bin_dir
from loadwise_dev.kube import Kube


async def kubectl(kubeconfig: Path, *args: str, timeout: float = 60) -> str:
    """The real kubectl's output; a failure fails the test with its stderr."""
    done = await asyncio.to_thread(
        subprocess.run,
        [str(k8s_bin_dir() / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


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


async def wait_operator_metrics(
    runtime: Runtime, expected: dict[str, float], tolerance: float = 0.02, timeout: float = 30
) -> None:
    """Until the operator's own Prometheus samples show each node's CPU within tolerance.
    `LocalCluster.wait_metrics` proves Prometheus has the figures; the operator's first
    refresh can still come back without them (a 5 s rate window misses a scrape delayed by a
    busy machine), and a test of load-aware placement must not run on request-based scoring."""

    async def seen() -> bool:
        samples = runtime.scheduler.usage.caches["prometheus"].samples
        return all(
            (s := samples.get(node)) is not None and abs(s.cpu - cpu) <= tolerance
            for node, cpu in expected.items()
        )

    await wait_for(seen, timeout, what="the operator's samples of node usage")


@contextlib.contextmanager
def real_node_cluster() -> Iterator[LocalCluster]:
    """A local cluster with one real node; on the way out nothing of the node may remain
    (process, mount, cgroup)."""
    cluster = LocalCluster(real_nodes=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        left = [item for node in cluster.real_nodes for item in node.leftovers()]
        assert not left, f"real nodes left behind: {left}"
