"""Devices chosen by their measured load (issue 50, item 2), against kube-scheduler's first fit:
a fleet of GPU nodes whose devices are unevenly busy, and a burst of pods each claiming one GPU,
placed once by kube-scheduler and once by loadwise, side by side on the same control plane.

Per seed: NODES nodes (equally busy CPUs, so only the devices differ) with DEVICES GPUs each in
ResourceSlices (a `uuid` attribute, as NVIDIA's driver publishes it); each GPU's utilisation is
published in DCGM's exporter's format (`DCGM_FI_DEV_GPU_UTIL{UUID=...}`, the dev exporter's
stand-in: no GPU here) and scraped by the real Prometheus: about a third above 90% (hot, the
policy's default device threshold), the rest between 2% and 85%. PODS pods with a claim for one
GPU from a template are created at once for one scheduler; when all are bound, each pod's
device and its utilisation are read from its claim; the pods go (the controller deletes their
claims) and the other scheduler gets the same burst. The best possible: the PODS coolest GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import manifests
from ..kube import Kube, KubeError

NS = "device-placement"
RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.example.com"
HOT = 90.0


@dataclass
class Side:
    scheduler: str
    bound: int = 0
    hot: int = 0  # pods given a GPU busier than HOT
    mean: float = 0.0  # mean utilisation of the GPUs given
    worst: float = 0.0
    seconds: float = 0.0
    devices: list[str] = field(default_factory=list)


def gen_fleet(rng: random.Random, nodes: int, devices: int) -> dict[str, float]:
    """GPU uuid -> percent busy."""
    busy = {}
    for n in range(nodes):
        for i in range(devices):
            hot = rng.random() < 1 / 3
            busy[f"GPU-g{n}-{i}"] = round(rng.uniform(91, 99) if hot else rng.uniform(2, 85), 1)
    return busy


async def setup(kube: Kube, cluster: Any, nodes: int, devices: int, busy: dict[str, float]) -> None:
    with contextlib.suppress(KubeError):
        await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    await kube.create(
        f"{RESOURCE}/deviceclasses",
        {"metadata": {"name": "gpu"}, "spec": {"selectors": [selector]}},
    )
    for n in range(nodes):
        name = f"g{n}"
        await cluster.add_node(kube, name, cpu_usage=0.3, mem_usage=0.3, cpu="64", memory="256Gi")
        gpus = []
        for i in range(devices):
            uuid = f"GPU-{name}-{i}"
            cluster.exporter.set_device(name, uuid, i, busy[uuid])
            gpus.append({"name": f"gpu-{i}", "attributes": {"uuid": {"string": uuid}}})
        body = {
            "metadata": {"name": f"{name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": name,
                "devices": gpus,
            },
        }
        await kube.create(f"{RESOURCE}/resourceslices", body)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    await kube.create(
        f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates",
        {"metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [request]}}}},
    )


async def burst(kube: Kube, scheduler: str, pods: int, busy: dict[str, float]) -> Side:
    side = Side(scheduler)
    started = time.monotonic()
    bodies = []
    for i in range(pods):
        body = manifests.pod(f"p{i}", namespace=NS, scheduler_name=scheduler, cpu="100m")
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        bodies.append(body)
    await asyncio.gather(*(kube.create(f"/api/v1/namespaces/{NS}/pods", b) for b in bodies))
    while time.monotonic() - started < 120:
        listed = await kube.list(f"/api/v1/namespaces/{NS}/pods")
        if all(p["spec"].get("nodeName") for p in listed):
            break
        await asyncio.sleep(0.2)
    side.seconds = time.monotonic() - started
    listed = await kube.list(f"/api/v1/namespaces/{NS}/pods")
    side.bound = sum(1 for p in listed if p["spec"].get("nodeName"))
    used = []
    for claim in await kube.list(f"{RESOURCE}/namespaces/{NS}/resourceclaims"):
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation or not claim["status"].get("reservedFor"):
            continue
        for r in allocation["devices"]["results"]:
            index = r["device"].rsplit("-", 1)[1]
            uuid = f"GPU-{r['pool']}-{index}"
            side.devices.append(uuid)
            used.append(busy[uuid])
    side.hot = sum(1 for u in used if u > HOT)
    side.mean = round(statistics.fmean(used), 1) if used else 0.0
    side.worst = max(used, default=0.0)
    await kube.delete_all_pods(NS)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the controller deletes the pods' claims
        if not await kube.list(f"{RESOURCE}/namespaces/{NS}/resourceclaims"):
            break
        await asyncio.sleep(0.2)
    return side


async def _run(seed: int, nodes: int, devices: int, pods: int) -> dict[str, Any]:
    import logging

    from ..cluster import LocalCluster, running_operator, wait_for

    logging.basicConfig(level=logging.WARNING)
    busy = gen_fleet(random.Random(seed), nodes, devices)
    cluster = LocalCluster(prometheus=True).start()
    try:
        cluster.cp.start_scheduler(qps=1000, burst=1000)
        prometheus = cluster.prometheus
        assert prometheus is not None
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            await setup(kube, cluster, nodes, devices, busy)
            await cluster.wait_namespace(kube, NS)

            async def scraped() -> bool:
                answer = await asyncio.to_thread(prometheus.query, "DCGM_FI_DEV_GPU_UTIL")
                return len(answer["data"]["result"]) == len(busy)

            await wait_for(scraped, 60, what="Prometheus to scrape every GPU")
            ks = await burst(kube, "default-scheduler", pods, busy)
            config = cluster.operator_config()
            async with running_operator(config, cluster.cp.kubeconfig):
                await asyncio.sleep(2.0)  # the operator's informers have listed
                lw = await burst(kube, config.scheduler_name, pods, busy)
    finally:
        cluster.stop()
    best = sorted(busy.values())[:pods]
    return {
        "seed": seed,
        "nodes": nodes,
        "devices_per_node": devices,
        "pods": pods,
        "hot_devices": sum(1 for u in busy.values() if u > HOT),
        "best_mean": round(statistics.fmean(best), 1),
        "kube_scheduler": ks.__dict__,
        "loadwise": lw.__dict__,
    }


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="GPUs chosen by load: loadwise vs kube-scheduler")
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 1 2 3")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--devices", type=int, default=4, help="GPUs per node")
    parser.add_argument("--pods", type=int, default=12, help="pods, one GPU each, per burst")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results = []
    for seed in args.seed or [1, 2, 3]:
        result = asyncio.run(_run(seed, args.nodes, args.devices, args.pods))
        results.append(result)
        ks, lw = result["kube_scheduler"], result["loadwise"]
        print(
            f"seed {seed}: {result['pods']} pods, one GPU each, on {result['nodes']} nodes x "
            f"{result['devices_per_node']} GPUs ({result['hot_devices']} above {HOT:g}%); "
            f"hot GPUs given: kube-scheduler {ks['hot']}, loadwise {lw['hot']}; mean "
            f"utilisation of the GPUs given: kube-scheduler {ks['mean']}%, loadwise "
            f"{lw['mean']}% (best possible {result['best_mean']}%); busiest given: "
            f"{ks['worst']}% vs {lw['worst']}%; bound {ks['bound']} vs {lw['bound']}"
        )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
