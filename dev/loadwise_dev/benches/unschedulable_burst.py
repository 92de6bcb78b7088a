"""1000 pods that fit nowhere, then one node that fits them all: how the queue recovers.

Reports how long until every pod is marked Unschedulable, how long from the node's creation
until every pod is bound, and how many events the scheduler wrote (one FailedScheduling per pod
is the goal: repeated identical failures are not re-reported within a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.kube import Kube

NS = "burst"


async def count_pods(kube: Kube) -> tuple[int, int]:
    """(bound, marked unschedulable)"""
    bound = unschedulable = 0
    for pod in await kube.list(f"/api/v1/namespaces/{NS}/pods"):
        if pod["spec"].get("nodeName"):
            bound += 1
        elif manifests.marked_unschedulable(pod):
            unschedulable += 1
    return bound, unschedulable


async def scenario(cluster: LocalCluster, pods: int) -> dict[str, Any]:
    async with cluster.kube() as kube:
        await cluster.install_crd(kube)
        await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await cluster.wait_namespace(kube, NS)
        await kube.create("/api/v1/nodes", manifests.node("small", cpu="1", memory="1Gi"))
        async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
            started = time.monotonic()
            sem = asyncio.Semaphore(64)

            async def create(i: int) -> None:
                async with sem:
                    body = manifests.pod(f"p{i:04d}", namespace=NS, cpu="2", memory="64Mi")
                    await kube.create(f"/api/v1/namespaces/{NS}/pods", body)

            await asyncio.gather(*(create(i) for i in range(pods)))
            created = time.monotonic() - started

            async def all_unschedulable() -> bool:
                return (await count_pods(kube))[1] == pods

            await wait_for(all_unschedulable, 300, interval=0.5, what="all marked Unschedulable")
            marked = time.monotonic() - started
            node_added = time.monotonic()
            big = manifests.node("big", cpu=str(2 * pods + 8), memory="4Ti", pods=pods + 10)
            await kube.create("/api/v1/nodes", big)

            async def all_bound() -> bool:
                return (await count_pods(kube))[0] == pods

            await wait_for(all_bound, 300, interval=0.2, what="all bound")
            recovered = time.monotonic() - node_added
            await asyncio.sleep(2)  # trailing events
            reasons: dict[str, int] = {}
            for event in await kube.list(f"/api/v1/namespaces/{NS}/events"):
                reasons[event["reason"]] = reasons.get(event["reason"], 0) + 1
    return {
        "pods": pods,
        "create_s": round(created, 2),
        "all_marked_unschedulable_s": round(marked, 2),
        "node_added_to_all_bound_s": round(recovered, 2),
        "events": reasons,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cluster = LocalCluster(prometheus=False).start()
    try:
        result = asyncio.run(scenario(cluster, args.pods))
    finally:
        cluster.stop()
    print(json.dumps(result, indent=1))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
