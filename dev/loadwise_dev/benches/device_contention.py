"""Two schedulers, one node's devices (issue 50, item 3): DRA assumes one scheduler owns a
node's devices, so loadwise and kube-scheduler allocating from the same ResourceSlices at once
can hand out one device twice (kubernetes#128980). This measures how often, and what loadwise's
guard (claim_binding.py: the check before it writes, and after writing on a pool another
scheduler allocates on, `LOADWISE_DEVICE_SETTLE` seconds later) leaves.

Per round, on one control plane with the real kube-scheduler: NODES nodes with DEVICES GPUs
each, and twice as many pods as devices, created at once, alternately for loadwise and for
kube-scheduler, each with a claim for one GPU from a template. When every pod is bound or
refused (or the round's time is up): a device held by two allocated claims is a double
allocation; a pod bound while its device is also another bound pod's is a double binding (the
kubelet would run both on one GPU). Rounds are run with the guard's wait off
(`--settle 0`: only the check before writing) and on (`--settle 1`, the default).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import manifests
from ..kube import Kube, KubeError

NS = "contention"
RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.example.com"


@dataclass
class Round:
    settle: float
    loadwise_bound: int = 0
    kube_scheduler_bound: int = 0
    refused_or_waiting: int = 0
    double_allocations: int = 0  # devices held by more than one allocated claim at the end
    double_bindings: int = 0  # ... whose claims are reserved for two bound pods
    seconds: float = 0.0
    devices: dict[str, int] = field(default_factory=dict)


async def setup(kube: Kube, nodes: int, devices: int) -> None:
    with contextlib.suppress(KubeError):
        await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    await kube.create(
        f"{RESOURCE}/deviceclasses",
        {"metadata": {"name": "gpu"}, "spec": {"selectors": [selector]}},
    )
    for n in range(nodes):
        name = f"n{n}"
        await kube.create("/api/v1/nodes", manifests.node(name, cpu="64", memory="256Gi", pods=110))
        body = {
            "metadata": {"name": f"{name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": name,
                "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
            },
        }
        await kube.create(f"{RESOURCE}/resourceslices", body)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    await kube.create(
        f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates",
        {"metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [request]}}}},
    )


async def one_round(kube: Kube, pods: int, settle: float, timeout: float) -> Round:
    result = Round(settle)
    started = time.monotonic()
    bodies = []
    for i in range(pods):
        scheduler = "loadwise-scheduler" if i % 2 == 0 else "default-scheduler"
        body = manifests.pod(f"p{i}", namespace=NS, scheduler_name=scheduler, cpu="10m")
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        bodies.append(body)
    await asyncio.gather(*(kube.create(f"/api/v1/namespaces/{NS}/pods", b) for b in bodies))
    while time.monotonic() - started < timeout:
        listed = await kube.list(f"/api/v1/namespaces/{NS}/pods")
        undecided = [
            p
            for p in listed
            if not p["spec"].get("nodeName") and not manifests.marked_unschedulable(p)
        ]
        if not undecided:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(2.0)  # the guard's undoing writes and the controller's deallocations
    result.seconds = time.monotonic() - started
    listed = await kube.list(f"/api/v1/namespaces/{NS}/pods")
    bound = {p["metadata"]["uid"] for p in listed if p["spec"].get("nodeName")}
    for pod in listed:
        if not pod["spec"].get("nodeName"):
            result.refused_or_waiting += 1
        elif pod["spec"]["schedulerName"] == "default-scheduler":
            result.kube_scheduler_bound += 1
        else:
            result.loadwise_bound += 1
    holders: Counter[str] = Counter()
    bound_holders: Counter[str] = Counter()
    for claim in await kube.list(f"{RESOURCE}/namespaces/{NS}/resourceclaims"):
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        reserved = {r["uid"] for r in claim["status"].get("reservedFor") or ()}
        for r in allocation["devices"]["results"]:
            device = f"{r['pool']}/{r['device']}"
            holders[device] += 1
            bound_holders[device] += bool(reserved & bound)
    result.double_allocations = sum(1 for n in holders.values() if n > 1)
    result.double_bindings = sum(1 for n in bound_holders.values() if n > 1)
    result.devices = {d: n for d, n in holders.items() if n > 1}
    await kube.delete_all_pods(NS)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the controller deletes the pods' claims
        if not await kube.list(f"{RESOURCE}/namespaces/{NS}/resourceclaims"):
            break
        await asyncio.sleep(0.2)
    return result


async def _run(nodes: int, devices: int, rounds: int, settles: list[float]) -> list[Round]:
    import logging

    from ..cluster import LocalCluster, running_operator

    logging.basicConfig(level=logging.WARNING)
    cluster = LocalCluster(prometheus=False).start()
    results = []
    try:
        cluster.cp.start_scheduler(qps=1000, burst=1000)
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            await setup(kube, nodes, devices)
            await cluster.wait_namespace(kube, NS)
            for settle in settles:
                config = cluster.operator_config(device_settle=settle)
                async with running_operator(config, cluster.cp.kubeconfig):
                    await asyncio.sleep(2.0)  # the operator's informers have listed
                    for _ in range(rounds):
                        results.append(await one_round(kube, 2 * nodes * devices, settle, 60))
    finally:
        cluster.stop()
    return results


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="loadwise and kube-scheduler on one's devices")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--devices", type=int, default=4, help="GPUs per node")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, action="append", help="repeatable; 0 and 1")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    settles = args.settle or [0.0, 1.0]
    rounds = asyncio.run(_run(args.nodes, args.devices, args.rounds, settles))
    for settle in settles:
        mine = [r for r in rounds if r.settle == settle]
        print(
            f"settle {settle:g} s: {len(mine)} rounds of {2 * args.nodes * args.devices} pods on "
            f"{args.nodes * args.devices} devices; double allocations "
            f"{[r.double_allocations for r in mine]}, double bindings "
            f"{[r.double_bindings for r in mine]}; bound lw {[r.loadwise_bound for r in mine]}, "
            f"ks {[r.kube_scheduler_bound for r in mine]}; "
            f"seconds {[round(r.seconds, 1) for r in mine]}"
        )
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps([r.__dict__ for r in rounds], indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
