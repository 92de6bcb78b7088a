"""Hot nodes every scheduler avoids (issue 51, item 4): a mixed cluster where kube-scheduler
places half of the pods, run twice on the same seed, with loadwise's soft taints off and on.

Per run, on a control plane of its own with the real kube-scheduler and Prometheus: NODES nodes
(8 CPUs) with the placement bench's uneven backgrounds (about 15% already hot); then, every
WAVE seconds for DURATION seconds, a wave of pods each using real CPU (the usage feeder loads
its node as it binds), alternately for loadwise and for kube-scheduler. Sampled every second
from the simulation's ground truth: **hot node-seconds** (nodes above 80% CPU), and **by
pods**, the part the backgrounds alone would not make (nodes hot only with what was placed);
kube-scheduler's pods placed on a node hot at that moment; the taint writes, per node per hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import manifests
from ..engines.placement import HOT, backgrounds, pod_usages
from ..kube import Kube, KubeError
from ..usage import UsageFeeder, usage_annotations

NS = "soft-taints"
NODE_CORES = 8


@dataclass
class Run:
    soft_taints: bool
    hot_node_seconds: float = 0.0
    by_pods: float = 0.0  # hot node-seconds of nodes whose background alone is not hot
    # CPU-seconds used above the hot line, summed over nodes (8 cores each): how far over
    over_line: float = 0.0
    peak: float = 0.0  # the hottest node's CPU at any sample
    ks_pods: int = 0
    ks_on_hot: int = 0  # kube-scheduler's pods bound to a node hot when they were bound
    lw_pods: int = 0
    lw_on_hot: int = 0
    taint_writes: int = 0
    writes_per_node_hour: float = 0.0
    seconds: float = 0.0
    tainted_max: int = 0
    trace: list[int] = field(default_factory=list)  # hot nodes per second


async def _run(seed: int, nodes: int, duration: float, wave: float, per_wave: int, on: bool) -> Run:
    import logging

    from loadwise import observability as obs

    from ..cluster import LocalCluster, running_operator

    logging.basicConfig(level=logging.WARNING)
    rng = random.Random(seed)
    back = {f"n{i:02d}": v for i, v in enumerate(backgrounds(rng, nodes).values())}
    waves = int(duration // wave)
    usages = pod_usages(rng, waves * per_wave)
    result = Run(on)
    cluster = LocalCluster(prometheus=True).start()
    try:
        cluster.cp.start_scheduler(qps=1000, burst=1000)
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            with contextlib.suppress(KubeError):
                await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            await cluster.wait_namespace(kube, NS)
            for name, (cpu, mem) in back.items():
                await cluster.add_node(
                    kube, name, cpu_usage=cpu, mem_usage=mem, cpu="8", memory="32Gi"
                )
            feeder = UsageFeeder(kube, cluster.exporter)
            await feeder.start()
            try:
                await cluster.wait_metrics({n: cpu for n, (cpu, _) in back.items()})
                config = cluster.operator_config(
                    soft_taints=on, soft_taint_hot_refreshes=3, soft_taint_cool_refreshes=5
                )
                writes = _writes(obs)
                async with running_operator(config, cluster.cp.kubeconfig):
                    await asyncio.sleep(2.0)  # the operator's informers have listed
                    await _waves(cluster, kube, result, usages, waves, wave, per_wave, back)
                result.taint_writes = _writes(obs) - writes
                if result.seconds:
                    hours = result.seconds / 3600
                    result.writes_per_node_hour = round(result.taint_writes / nodes / hours, 1)
            finally:
                await feeder.stop()
    finally:
        cluster.stop()
    return result


def _writes(obs: Any) -> int:
    return int(sum(obs.SOFT_TAINT_WRITES.labels(op)._value.get() for op in ("add", "remove")))


async def _waves(
    cluster: Any,
    kube: Kube,
    result: Run,
    usages: list[tuple[str, str]],
    waves: int,
    wave: float,
    per_wave: int,
    back: dict[str, tuple[float, float]],
) -> None:
    started = time.monotonic()
    hot_when_bound: dict[str, bool] = {}
    sampling = asyncio.create_task(_sample(cluster, kube, result, back, hot_when_bound))
    try:
        for w in range(waves):
            bodies = []
            for k in range(per_wave):
                i = w * per_wave + k
                scheduler = "default-scheduler" if i % 2 else "loadwise-scheduler"
                cpu, memory = usages[i]
                bodies.append(
                    manifests.pod(
                        f"p{i:04d}", namespace=NS, scheduler_name=scheduler, cpu="100m",
                        memory="256Mi", annotations=usage_annotations(cpu, memory),
                    )
                )  # fmt: skip
            await asyncio.gather(*(kube.create(f"/api/v1/namespaces/{NS}/pods", b) for b in bodies))
            await asyncio.sleep(max(0.0, started + (w + 1) * wave - time.monotonic()))
        await asyncio.sleep(wave)  # the last wave's usage shows
    finally:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
    result.seconds = round(time.monotonic() - started, 1)
    for pod in await kube.list(f"/api/v1/namespaces/{NS}/pods"):
        mine = pod["spec"]["schedulerName"] != "default-scheduler"
        hot = hot_when_bound.get(pod["metadata"]["name"], False)
        if mine:
            result.lw_pods += 1
            result.lw_on_hot += hot
        else:
            result.ks_pods += 1
            result.ks_on_hot += hot


async def _sample(
    cluster: Any,
    kube: Kube,
    result: Run,
    back: dict[str, tuple[float, float]],
    hot_when_bound: dict[str, bool],
) -> None:
    """Every second: the ground truth's hot nodes, and each newly bound pod's node then."""
    seen: set[str] = set()
    while True:
        began = time.monotonic()
        truth = await cluster.utilisation(kube)
        hot = {n for n, (cpu, _) in truth.items() if n in back and cpu > HOT}
        result.hot_node_seconds += len(hot)
        result.by_pods += sum(1 for n in hot if back[n][0] <= HOT)
        result.over_line += sum(
            max(0.0, truth[n][0] - HOT) * NODE_CORES for n in truth if n in back
        )
        result.peak = max(result.peak, *(truth[n][0] for n in truth if n in back))
        result.trace.append(len(hot))
        nodes = await kube.list("/api/v1/nodes")
        tainted = sum(
            1
            for n in nodes
            if any(t.get("key") == "loadwise.io/hot" for t in n["spec"].get("taints") or ())
        )
        result.tainted_max = max(result.tainted_max, tainted)
        for pod in await kube.list(f"/api/v1/namespaces/{NS}/pods"):
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if node and name not in seen:
                seen.add(name)
                hot_when_bound[name] = node in hot
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - began)))


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="soft taints: hot node-seconds, off and on")
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 1")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--duration", type=float, default=90.0, help="seconds of waves")
    parser.add_argument("--wave", type=float, default=5.0, help="seconds between waves")
    parser.add_argument("--per-wave", type=int, default=12, help="pods per wave")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for seed in args.seed or [1]:
        for on in (False, True):
            run = asyncio.run(_run(seed, args.nodes, args.duration, args.wave, args.per_wave, on))
            results.append({"seed": seed, **run.__dict__})
            print(
                f"seed {seed}, soft taints {'on' if on else 'off'}: hot node-seconds "
                f"{run.hot_node_seconds:.0f} (by pods {run.by_pods:.0f}), CPU-seconds over the "
                f"line {run.over_line:.0f}, peak {run.peak:.0%}; kube-scheduler's pods "
                f"on a hot node {run.ks_on_hot} of {run.ks_pods}, loadwise's {run.lw_on_hot} of "
                f"{run.lw_pods}; nodes tainted at most {run.tainted_max}; taint writes "
                f"{run.taint_writes} ({run.writes_per_node_hour} per node per hour); "
                f"{run.seconds} s"
            )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
