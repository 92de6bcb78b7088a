"""A leader change in the middle of a burst: does the new leader judge nodes by full windows?

Per run, on a control plane of its own with the real Prometheus (1 s scrapes): NODES 4-core
nodes, half of them bursty (their background at 95% CPU for BUSY seconds of every PERIOD, 20%
otherwise, each at its own phase) and half steady (35-55%). The policy judges load by its peak,
`aggregation: max` over WINDOW seconds, so a bursty node is hot all the time for it. A replica
leads for a full window, places the first half of a burst of pods (each using real CPU, the
usage feeder loads its node as it binds), then stops (a rolling upgrade: the lease released)
and a new replica starts and places the second half, once with its windows filled from
Prometheus' history (metrics.backfill, the default) and once without (its own samples only).

**Hot placements**: pods bound to a node that was over 80% CPU at some moment of the policy's
window before the binding (the simulation's ground truth, sampled every half second), before and
after the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import manifests
from ..engines.placement import HOT, pod_usages
from ..kube import Kube, KubeError
from ..usage import UsageFeeder, usage_annotations

NS = "restart-window"
WINDOW, PERIOD, BUSY = 60, 30, 8
METRICS = {"aggregation": "max", "windowSeconds": WINDOW}


@dataclass
class Run:
    backfill: bool
    before: int = 0  # pods the first leader placed
    before_hot: int = 0
    after: int = 0  # pods the new leader placed
    after_hot: int = 0
    after_bursty: int = 0  # of those, on a bursty node
    takeover: float = 0.0  # seconds from the first leader's stop to the new leader's first bind
    # (seen by the half-second sampler)
    seconds: float = 0.0
    hot_at_bind: dict[str, bool] = field(default_factory=dict)
    bound_at: dict[str, float] = field(default_factory=dict)  # monotonic, as first seen


def world(seed: int, nodes: int) -> tuple[dict[str, float], dict[str, float]]:
    """Steady nodes' backgrounds, and bursty nodes' phases (seconds into PERIOD)."""
    rng = random.Random(seed)
    steady = {f"s{i:02d}": round(rng.uniform(0.35, 0.55), 3) for i in range(nodes // 2)}
    bursty = {f"b{i:02d}": rng.uniform(0, PERIOD) for i in range(nodes - nodes // 2)}
    return steady, bursty


async def _run(seed: int, nodes: int, waves: int, per_wave: int, backfill: bool) -> Run:
    import logging

    from ..cluster import LocalCluster, running_operator, wait_bound_count

    logging.basicConfig(level=logging.WARNING)
    steady, bursty = world(seed, nodes)
    usages = pod_usages(random.Random(seed + 1000), waves * per_wave)
    result = Run(backfill)
    cluster = LocalCluster(prometheus=True).start()
    try:
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            with contextlib.suppress(KubeError):
                await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            await cluster.wait_namespace(kube, NS)
            for name, cpu in steady.items():
                await cluster.add_node(kube, name, cpu_usage=cpu, cpu="4")
            for name in bursty:
                await cluster.add_node(kube, name, cpu_usage=0.2, cpu="4")
            await kube.create(
                "/apis/loadwise.io/v1alpha1/schedulingpolicies",
                manifests.policy("peaks", cpu=1, memory=0, metrics=METRICS),
            )
            feeder = UsageFeeder(kube, cluster.exporter)
            await feeder.start()
            cycling = asyncio.create_task(_cycle(cluster, bursty))
            truth: deque[tuple[float, dict[str, float]]] = deque()
            sampling = asyncio.create_task(_sample(cluster, kube, truth, result))
            try:
                lease = f"restart-window-{seed}-{int(backfill)}"
                first = cluster.operator_config(lease_name=lease)
                second = cluster.operator_config(lease_name=lease, metrics_backfill=backfill)
                started = time.monotonic()
                async with running_operator(first, cluster.cp.kubeconfig):
                    await asyncio.sleep(WINDOW + 5)  # the leader's windows are full
                    await _waves(kube, usages, range(waves // 2), per_wave)
                    await asyncio.sleep(2.0)
                stopped = time.monotonic()
                rest = asyncio.create_task(_waves(kube, usages, range(waves // 2, waves), per_wave))
                async with running_operator(second, cluster.cp.kubeconfig):
                    await rest
                    await wait_bound_count(kube, NS, waves * per_wave)
                    await asyncio.sleep(1.0)  # the sampler sees the last ones
                after = [
                    t for n, t in result.bound_at.items() if int(n[1:]) >= waves // 2 * per_wave
                ]
                result.takeover = round(min(after, default=stopped) - stopped, 1)
                result.seconds = round(time.monotonic() - started, 1)
            finally:
                for task in (cycling, sampling):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await feeder.stop()
            _count(result, waves // 2 * per_wave, bursty)
    finally:
        cluster.stop()
    return result


async def _cycle(cluster: Any, bursty: dict[str, float]) -> None:
    """Each bursty node's background: 95% for BUSY seconds of every PERIOD, else 20%."""
    began = time.monotonic()
    while True:
        at = time.monotonic() - began
        for name, phase in bursty.items():
            busy = (at + phase) % PERIOD < BUSY
            cluster.exporter.set_usage(name, 0.95 if busy else 0.2, 0.3)
        await asyncio.sleep(0.25)


async def _waves(kube: Kube, usages: list[tuple[str, str]], waves: range, per_wave: int) -> None:
    for w in waves:
        bodies = []
        for k in range(per_wave):
            i = w * per_wave + k
            cpu, memory = usages[i]
            bodies.append(manifests.pod(
                f"p{i:04d}", namespace=NS, cpu="100m", memory="256Mi",
                annotations=usage_annotations(cpu, memory),
            ))  # fmt: skip
        await asyncio.gather(*(kube.create(f"/api/v1/namespaces/{NS}/pods", b) for b in bodies))
        await asyncio.sleep(2.0)


async def _sample(
    cluster: Any, kube: Kube, truth: deque[tuple[float, dict[str, float]]], result: Run
) -> None:
    """Every half second: the ground truth, and each newly bound pod's node's peak over the
    policy's window before it."""
    while True:
        now = time.monotonic()
        cpu = {n: c for n, (c, _) in (await cluster.utilisation(kube)).items()}
        truth.append((now, cpu))
        while truth and truth[0][0] < now - WINDOW:
            truth.popleft()
        for pod in await kube.list(f"/api/v1/namespaces/{NS}/pods"):
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if node and name not in result.hot_at_bind:
                peak = max((c.get(node, 0.0) for _, c in truth), default=0.0)
                result.hot_at_bind[name] = peak > HOT
                result.hot_at_bind[f"{name}@"] = node.startswith("b")  # on a bursty node
                result.bound_at[name] = now
        await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - now)))


def _count(result: Run, first: int, bursty: dict[str, float]) -> None:
    for name, hot in list(result.hot_at_bind.items()):
        if name.endswith("@"):
            continue
        index = int(name[1:])
        if index < first:
            result.before += 1
            result.before_hot += hot
        else:
            result.after += 1
            result.after_hot += hot
            result.after_bursty += result.hot_at_bind[f"{name}@"]


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="a leader change mid-burst, backfill on/off")
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 1")
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--waves", type=int, default=8, help="half before the change")
    parser.add_argument("--per-wave", type=int, default=6)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for seed in args.seed or [1]:
        for backfill in (False, True):
            run = asyncio.run(_run(seed, args.nodes, args.waves, args.per_wave, backfill))
            row = {k: v for k, v in run.__dict__.items() if k not in ("hot_at_bind", "bound_at")}
            results.append({"seed": seed, **row})
            print(
                f"seed {seed}, backfill {'on' if backfill else 'off'}: first leader "
                f"{run.before_hot} of {run.before} pods on a hot node; new leader "
                f"{run.after_hot} of {run.after} on a hot node ({run.after_bursty} on a bursty "
                f"one); first bind {run.takeover} s after the change; {run.seconds} s",
                flush=True,
            )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
