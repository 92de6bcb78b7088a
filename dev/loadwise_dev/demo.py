"""`loadwise-dev demo`: the whole product on a local control plane, in about half a minute.

Starts etcd, kube-apiserver, KWOK and Prometheus on loopback (no controller-manager), installs
the CRD and a SchedulingPolicy, creates six simulated nodes with uneven load, runs the operator,
submits pods with `schedulerName: loadwise-scheduler`, and prints where each landed and why.
KWOK plays the nodes' kubelets and serves their usage as cAdvisor series (a node's background is
a pod of its own: kwok_usage.py), which Prometheus scrapes and loadwise reads with the
kube-prometheus-stack preset.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from . import manifests
from .cluster import LocalCluster, running_operator, wait_for
from .kube import Kube

NODES = {  # name: (cpu usage, memory usage) reported through Prometheus
    "node-1": (0.85, 0.60),
    "node-2": (0.70, 0.40),
    "node-3": (0.50, 0.50),
    "node-4": (0.30, 0.20),
    "node-5": (0.15, 0.35),
    "node-6": (0.05, 0.10),
}
PODS = 12
POLICY = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
LEGEND = """\
score: 0..100 per node, the best node 100 after normalising; 80% from measured load (CPU
  weighted 2, memory 1) and 20% from requests. Each pod's line shows the chosen node's figures.
hot threshold: a node above 80% CPU or 90% memory gets no new pods while a cooler one fits.
estimate: a pod placed since the node's last Prometheus sample (and the pod being placed) counts
  as 1.5 x its CPU and 1 x its memory requests in the node's load until a sample shows it, so a
  burst does not herd onto the node that looked idlest."""


def _say(text: str) -> None:
    print(text, flush=True)


async def _demo(cluster: LocalCluster, keep: bool) -> None:
    async with cluster.kube() as kube:
        await cluster.install_crd(kube)
        await kube.create(POLICY, manifests.policy("default", cpu=2, memory=1))
        _say("installed CRD schedulingpolicies.loadwise.io and policy 'default' (cpu 2, memory 1)")
        for name, (cpu, mem) in NODES.items():
            await cluster.add_node(kube, name, cpu_usage=cpu, mem_usage=mem)
        _say(
            f"created {len(NODES)} simulated nodes (4 cpu, 16Gi each; KWOK plays their kubelets);"
            " waiting for Prometheus"
        )
        await cluster.wait_metrics({name: cpu for name, (cpu, _) in NODES.items()}, timeout=60)
        await cluster.wait_namespace(kube, "default")
        async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
            _say(f"operator running; submitting {PODS} pods (500m cpu, 1Gi) for loadwise-scheduler")
            started = time.monotonic()
            names = [f"demo-{i:02d}" for i in range(PODS)]
            await asyncio.gather(
                *(
                    kube.create(
                        "/api/v1/namespaces/default/pods",
                        manifests.pod(n, cpu="500m", memory="1Gi"),
                    )
                    for n in names
                )
            )

            async def bound() -> list[dict[str, Any]] | None:
                pods = await kube.list("/api/v1/namespaces/default/pods")
                return pods if all(p["spec"].get("nodeName") for p in pods) else None

            pods = await wait_for(bound, 60, what="demo pods bound")
            elapsed = time.monotonic() - started

            async def running() -> bool:
                listed = await kube.list("/api/v1/namespaces/default/pods")
                return all(p["status"].get("phase") == "Running" for p in listed)

            await wait_for(running, 60, interval=0.25, what="demo pods Running")
            ran = time.monotonic() - started
            events = await wait_for(
                lambda: _scheduled_events(kube, names), 10, what="Scheduled events"
            )
        _say(
            f"\nall {PODS} pods bound in {elapsed:.2f}s (Running, as KWOK plays the kubelet, "
            f"after {ran:.1f}s), in the order loadwise decided:\n"
        )
        _say(LEGEND)
        _say(f"\n{'#':>2} {'POD':<9} {'NODE':<8} WHY (from the pod's Scheduled event)")
        placed: dict[str, int] = dict.fromkeys(NODES, 0)
        node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        for name in sorted(names, key=lambda n: events[n][0]):
            node = node_of[name]
            placed[node] += 1
            number, message = events[name]
            why = message.split("; ", 1)[-1]
            _say(f"{number:>2} {name:<9} {node:<8} {why}")
        _say(f"\n{'NODE':<8} {'CPU BEFORE':>10} {'MEM BEFORE':>10} {'PODS PLACED':>11}")
        for name, (cpu, mem) in NODES.items():
            _say(f"{name:<8} {cpu:>10.0%} {mem:>10.0%} {placed[name]:>11}")
        hot = [n for n, (cpu, _) in NODES.items() if cpu >= 0.6]
        _say(
            f"\npods placed on nodes already at 60%+ CPU ({', '.join(hot)}): "
            f"{sum(placed[n] for n in hot)} of {PODS}"
        )
        if keep:
            # kopf owns SIGINT and SIGTERM while it runs: its stopping is the signal to finish.
            stopped = asyncio.Event()
            async with running_operator(
                cluster.operator_config(), cluster.cp.kubeconfig, on_exit=stopped.set
            ):
                # Said once the kept operator runs (and holds the signals): Ctrl-C works now.
                _say(
                    "\nstill running (operator included): "
                    f"export KUBECONFIG={cluster.cp.kubeconfig}"
                    "\nthen try kubectl get schedpol, kubectl describe pod demo-00;"
                    " Ctrl-C stops all"
                    "\n(`make cluster` gives a cluster to keep; walk-through: docs/try-it.md)"
                )
                await stopped.wait()


async def _scheduled_events(kube: Kube, names: list[str]) -> dict[str, tuple[int, str]] | None:
    """pod -> (decision number, message) of its Scheduled event: the number loadwise gave the
    decision, in the order it made them (binds and event writes run concurrently, so when an
    event was written says little about the order)."""
    events = {
        e["involvedObject"]["name"]: (_decision_number(e["message"]), e["message"])
        for e in await kube.list("/api/v1/namespaces/default/events")
        if e["reason"] == "Scheduled"
    }
    return events if all(n in events for n in names) else None


def _decision_number(message: str) -> int:
    found = re.search(r"\(decision (\d+)\)", message)
    return int(found.group(1)) if found else 0


def main(keep: bool = False) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _say("starting etcd, kube-apiserver, KWOK and Prometheus on 127.0.0.1")
    started = time.monotonic()
    # No controller-manager: the demo's pods need none (one less binary to build on a new
    # machine's first `make demo`: hack/ensure-tools --for demo).
    cluster = LocalCluster(kwok_usage=True, controller_manager=False).start()
    _say(f"control plane ready in {time.monotonic() - started:.1f}s at {cluster.cp.server}")
    try:
        asyncio.run(_demo(cluster, keep))
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
        _say("stopped everything")
    return 0
