"""Device cases for bench/preemption (dynamic resource allocation): some nodes of a case publish
GPUs in a ResourceSlice, some placed pods hold one through an allocated ResourceClaim reserved
for them, and the preemptor claims one GPU (a claim of its copy, named by the pod). Generated
from a stream of their own, so the other cases stay what they were; twin cases get none (their
tie is the point).

What both schedulers must agree on: a node whose GPUs are all taken is no candidate, even when
the pods holding them are victims: kube-scheduler's DynamicResources has no PreFilterExtensions
(v1.37.2), so its allocator keeps the victims' devices taken in the dry run, as loadwise's does.
A node with a free GPU is a candidate like any other.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from typing import Any

from ..kube import Kube, KubeError

DEVICE_STREAM = 0xD7A
DEVICE_SHARE = 0.35  # cases with devices
DRIVER = "gpu.preemption.loadwise.dev"
CLASS = "pe-gpu"
RESOURCE = "/apis/resource.k8s.io/v1"
PREEMPTOR_CLAIM = "pre-gpu"


@dataclass
class DeviceSpec:
    gpus: dict[int, int]  # node index -> GPUs in its slice
    held: dict[str, int]  # placed pod -> the GPU (index on its node) its claim holds


def generate(rng: random.Random, nodes: int, pods: list[tuple[str, int]]) -> DeviceSpec | None:
    """`pods`: (name, node index) of the placed pods."""
    if rng.random() >= DEVICE_SHARE:
        return None
    gpus = {i: rng.randint(1, 2) for i in range(nodes) if rng.random() < 0.7}
    held: dict[str, int] = {}
    for i, count in gpus.items():
        on = [name for name, node in pods if node == i]
        for gpu in range(count):
            if on and rng.random() < 0.6:
                name = rng.choice(on)
                on.remove(name)
                held[name] = gpu
    return DeviceSpec(gpus, held)


async def ensure_class(kube: Kube) -> None:
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    body = {"metadata": {"name": CLASS}, "spec": {"selectors": [selector]}}
    try:
        await kube.create(f"{RESOURCE}/deviceclasses", body)
    except KubeError as exc:
        if exc.status != 409:
            raise


def _claim(ns: str, name: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": CLASS}}
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [request]}},
    }


async def make(
    kube: Kube, spec: DeviceSpec, ns: str, node_names: list[str], uids: dict[str, str],
    node_of: dict[str, int],
) -> None:  # fmt: skip
    """The copy's slices, the placed pods' allocated claims, the preemptor's claim."""
    for i, count in spec.gpus.items():
        node = node_names[i]
        body = {
            "metadata": {"name": f"{node}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node,
                "devices": [{"name": f"gpu-{g}"} for g in range(count)],
            },
        }
        await kube.create(f"{RESOURCE}/resourceslices", body)
    for pod, gpu in spec.held.items():
        node = node_names[node_of[pod]]
        await kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", _claim(ns, f"{pod}-gpu"))
        field = {"key": "metadata.name", "operator": "In", "values": [node]}
        status = {
            "allocation": {
                "allocationTimestamp": "2026-11-29T00:00:00Z",
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{gpu}"}
                    ]
                },
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [field]}]},
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": uids[pod]}],
        }
        path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/{pod}-gpu/status"
        await kube.merge_patch(path, {"status": status})
    await kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", _claim(ns, PREEMPTOR_CLAIM))


def claim_for(body: dict[str, Any]) -> None:
    """The preemptor names its copy's claim for one GPU."""
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": PREEMPTOR_CLAIM}]
    body["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]


async def remove(kube: Kube, spec: DeviceSpec, ns: str, node_names: list[str]) -> None:
    for claim in await kube.list(f"{RESOURCE}/namespaces/{ns}/resourceclaims"):
        path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/{claim['metadata']['name']}"
        with contextlib.suppress(KubeError):
            if claim["metadata"].get("finalizers"):
                await kube.merge_patch(path, {"metadata": {"finalizers": None}})
            await kube.delete(path)
    for i in spec.gpus:
        with contextlib.suppress(KubeError):
            await kube.delete(f"{RESOURCE}/resourceslices/{node_names[i]}-gpus")
