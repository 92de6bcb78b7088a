"""The shadow trial's prediction against what loadwise achieves placing the same pods.

Per seed, two runs on control planes of their own, each with the real Prometheus and the
placement bench's world (NODES 4-core nodes with uneven backgrounds, about 15% already hot; a
burst of pods each using 20-250m of real CPU, the usage feeder loading its node as it binds):

1. kube-scheduler places the burst while loadwise runs as a shadow trial beside it;
2. loadwise places the same burst (same seed), scheduling for real.

From the ground truth, sampled every half second: pods bound to a node over 80% CPU at that
moment, and the nodes' CPU spread (stddev) and hottest node once the burst's use shows. From
the shadow trial's report at the end of run 1: how many of kube-scheduler's pods it judged to
be on a hot node, how many it would have put on one, and its estimated spread had it placed
them. The prediction is good when run 2's figures come out near the report's.
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
from ..engines.placement import HOT, backgrounds, pod_usages
from ..kube import Kube, KubeError
from ..usage import UsageFeeder, usage_annotations

NS = "shadow"


@dataclass
class Run:
    scheduler: str
    pods: int = 0
    on_hot: int = 0  # bound to a node over 80% (ground truth) when first seen bound
    cpu_stddev: float = 0.0  # after the burst's use shows
    cpu_max: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)  # the shadow trial's, run 1


async def _run(seed: int, nodes: int, waves: int, per_wave: int, shadow: bool) -> Run:
    import logging

    from ..cluster import LocalCluster, running_operator, wait_bound_count

    logging.basicConfig(level=logging.WARNING)
    rng = random.Random(seed)
    back = {f"n{i:02d}": v for i, v in enumerate(backgrounds(rng, nodes).values())}
    usages = pod_usages(rng, waves * per_wave)
    scheduler = "default-scheduler" if shadow else "loadwise-scheduler"
    result = Run(scheduler)
    cluster = LocalCluster(prometheus=True).start()
    try:
        if shadow:
            cluster.cp.start_scheduler(qps=1000, burst=1000)
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            with contextlib.suppress(KubeError):
                await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
            await cluster.wait_namespace(kube, NS)
            for name, (cpu, mem) in back.items():
                await cluster.add_node(kube, name, cpu_usage=cpu, mem_usage=mem, cpu="4")
            feeder = UsageFeeder(kube, cluster.exporter)
            await feeder.start()
            try:
                await cluster.wait_metrics({n: cpu for n, (cpu, _) in back.items()})
                config = cluster.operator_config(shadow=shadow)
                async with running_operator(config, cluster.cp.kubeconfig) as runtime:
                    await asyncio.sleep(2.0)  # the informers have listed
                    hot_at_bind: dict[str, bool] = {}
                    sampling = asyncio.create_task(_sample(cluster, kube, hot_at_bind))
                    try:
                        await _burst(kube, usages, waves, per_wave, scheduler)
                        await wait_bound_count(kube, NS, waves * per_wave)
                        await asyncio.sleep(8.0)  # the last pods' use shows in the metrics
                    finally:
                        sampling.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await sampling
                    if runtime.shadow is not None:
                        result.report = runtime.shadow.report(rows=0)
                truth = await cluster.utilisation(kube)
                used = [truth[n][0] for n in back if n in truth]
                result.cpu_stddev = round(statistics.pstdev(used), 4)
                result.cpu_max = round(max(used), 4)
                result.pods = len(hot_at_bind)
                result.on_hot = sum(hot_at_bind.values())
            finally:
                await feeder.stop()
    finally:
        cluster.stop()
    return result


async def _burst(
    kube: Kube, usages: list[tuple[str, str]], waves: int, per_wave: int, scheduler: str
) -> None:
    for w in range(waves):
        bodies = [
            manifests.pod(
                f"p{i:04d}", namespace=NS, scheduler_name=scheduler, cpu="100m",
                memory="256Mi", annotations=usage_annotations(*usages[i]),
            )
            for i in range(w * per_wave, (w + 1) * per_wave)
        ]  # fmt: skip
        await asyncio.gather(*(kube.create(f"/api/v1/namespaces/{NS}/pods", b) for b in bodies))
        await asyncio.sleep(2.0)


async def _sample(cluster: Any, kube: Kube, hot_at_bind: dict[str, bool]) -> None:
    """Every half second: each newly bound pod, and whether its node is over 80% then."""
    while True:
        began = time.monotonic()
        truth = await cluster.utilisation(kube)
        for pod in await kube.list(f"/api/v1/namespaces/{NS}/pods"):
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if node and name not in hot_at_bind:
                hot_at_bind[name] = truth.get(node, (0.0, 0.0))[0] > HOT
        await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - began)))


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="the shadow trial's prediction vs loadwise")
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 1")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--waves", type=int, default=8)
    parser.add_argument("--per-wave", type=int, default=10)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for seed in args.seed or [1]:
        ks = asyncio.run(_run(seed, args.nodes, args.waves, args.per_wave, shadow=True))
        lw = asyncio.run(_run(seed, args.nodes, args.waves, args.per_wave, shadow=False))
        r = ks.report
        results.append({"seed": seed, "kube_scheduler": ks.__dict__, "loadwise": lw.__dict__})
        print(
            f"seed {seed}: pods on a node over 80% when bound: kube-scheduler {ks.on_hot} of "
            f"{ks.pods}; the shadow trial judged {r.get('placed_hot')} of {r.get('pods')} of "
            f"them on a hot node and would have put {r.get('would_hot')} there; loadwise placing "
            f"them: {lw.on_hot} of {lw.pods}. CPU stddev / hottest after the burst: "
            f"kube-scheduler {ks.cpu_stddev:.3f} / {ks.cpu_max:.0%} (the trial's measure "
            f"{r.get('cpu_stddev_now')} / {r.get('cpu_max_now')}), predicted for loadwise "
            f"{r.get('cpu_stddev_loadwise')} / {r.get('cpu_max_loadwise')}, loadwise "
            f"{lw.cpu_stddev:.3f} / {lw.cpu_max:.0%}",
            flush=True,
        )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
