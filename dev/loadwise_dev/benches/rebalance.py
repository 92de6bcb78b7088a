"""Keeping nodes cool after placement: drifting load, three ways on the same seed.

bench/rebalance [--seed S] [--nodes N] [--workloads W] [--duration SECONDS] [--runs a,b,c]
                [--usage kwok|exporter] [--json PATH] [--png PATH]
Sets up its own control plane (with kube-controller-manager: ReplicaSets, PodDisruptionBudgets),
KWOK running the pods and Prometheus, and tears them down. Usage (--usage kwok, the default):
each pod's KWOK usage annotations, which the drift patches, served by KWOK as cAdvisor series
and read with kube-prometheus-stack's preset queries; a node's background is a pod of its own
(kwok_usage.py). --usage exporter: the harness's exporter publishes the same (as up to
10e2209, but throttled now as the KWOK usage is: drift.throttled).
Per run, fresh nodes and a namespace; ReplicaSets (some with a budget, one of higher priority)
whose pods the harness binds where the seed says (every run starts from that one placement, all
nodes cool), then the run's scheduler starts; three workloads in eight then use two to three
times their requests (drift.scenario: about 60% of the cluster's CPU in use), and the nodes are
watched for --duration seconds; the run's scheduler places every replacement:
- loadwise: loadwise places, nothing rebalances;
- loadwise-rebalance: the same with spec.rebalance Evict (hotRefreshes 3, coolRefreshes 3,
  the limits printed);
- descheduler: kube-scheduler places by requests and the real descheduler (v0.36.0, built by
  hack/ensure-tools; descheduler.py) runs LowNodeUtilization on Prometheus' node CPU every 5 s
  (thresholds 50%, targetThresholds 80%, its default evictor and limits);
- descheduler-like: the same with our simulation of it (lownode.py) in its place, which evicts
  one pod per hot node per cycle, as the real one does with Prometheus' figures (it knows no
  pod's use then). Kept to check the simulation against the real one.
hot node-s: node-seconds above the hot threshold (80% CPU) by the ground truth (what the
started pods use, without the metrics' lag);
back: replacements placed on the node their pod was evicted from (within the cool-down);
pdb: budgets seen below desiredHealthy; lost: workloads with fewer ready replicas than wanted
after the run settles (60 s, rebalancing off); max/workload: most evictions of one workload.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.descheduler import RealDescheduler
from loadwise_dev.engines import drift
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.lownode import LowNodeUtilization

RUNS = ("loadwise", "loadwise-rebalance", "descheduler", "descheduler-like")
KUBE_SCHEDULED = ("descheduler", "descheduler-like")
POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
LIMITS = {"perNodePerHour": 3, "perNamespacePerHour": 30, "perWorkloadPerHour": 2,
          "clusterPerMinute": 5}  # fmt: skip
COLUMNS = (
    ("hot_node_seconds", "hot node-s", "{:.0f}"),
    ("evictions", "evictions", "{}"),
    ("evictions_back_to_source", "back", "{}"),
    ("pdb_violations", "pdb", "{}"),
    ("lost", "lost", "{}"),
    ("max_disruptions_per_workload", "max/workload", "{}"),
)
log = logging.getLogger("bench.rebalance")


async def ignore_exists(call: Any) -> None:
    try:
        await call
    except KubeError as exc:
        if exc.status != 409:
            raise


async def one_run(
    cluster: LocalCluster, kube: Kube, plan: drift.Scenario, name: str, index: int, duration: float
) -> tuple[dict[str, Any], dict[str, list[tuple[float, float]]], float]:
    ns = f"rb-{index}-s{plan.seed}"
    label = f"rb{index}"
    await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    await cluster.wait_namespace(kube, ns)
    nodes = [f"rb{index}-{j}" for j in range(len(plan.backgrounds))]
    for node, background in zip(nodes, plan.backgrounds, strict=True):
        await cluster.add_node(kube, node, cpu_usage=background, mem_usage=0.1, kwok=True)
    config = cluster.operator_config(rebalance_evictions=True)
    rebalance = {"enabled": name == "loadwise-rebalance", "mode": "Evict", "hotRefreshes": 3,
                 "coolRefreshes": 3, "limits": LIMITS}  # fmt: skip
    policy = {
        "apiVersion": "loadwise.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": label},
        "spec": {"podSelector": {"matchLabels": {"app": label}}, "rebalance": rebalance},
    }
    scheduler = "default-scheduler" if name in KUBE_SCHEDULED else "loadwise-scheduler"
    usage: drift.PodUsage = (
        drift.KwokPodUsage(kube, cluster.usage)
        if cluster.usage is not None
        else drift.ExporterPodUsage(cluster.exporter)
    )
    driver = drift.Driver(kube, usage, ns, nodes, plan)
    async with contextlib.AsyncExitStack() as stack:
        driver.start()
        stack.push_async_callback(driver.stop)
        for workload in plan.workloads:
            rs = drift.replicaset(ns, workload, scheduler, label)
            await kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", rs)
            if workload.budget:
                await kube.create(
                    f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                    drift.budget(ns, workload),
                )
        wanted = sum(w.replicas for w in plan.workloads)
        await place_as_planned(kube, ns, plan, nodes)
        # Only now the run's scheduler starts: it places the replacements.
        if scheduler == "default-scheduler":
            start_kube_scheduler(cluster)
        else:
            await kube.create(POLICIES, policy)
            await stack.enter_async_context(running_operator(config, cluster.cp.kubeconfig))

        async def all_running() -> bool:
            pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
            return bool(sum(p["status"].get("phase") == "Running" for p in pods) >= wanted)

        await wait_for(all_running, 180, interval=1, what=f"{wanted} pods running ({name})")
        await asyncio.sleep(20)  # usage settles in Prometheus; estimates learn the base use
        start = time.time()
        driver.drift_at, driver.measuring = start, True
        descheduler = None
        real = RealDescheduler(cluster, kube, ns) if name == "descheduler" else None
        if real is not None:
            await real.start()
        if name == "descheduler-like":
            assert cluster.prometheus is not None
            prometheus = cluster.prometheus

            def measured() -> dict[str, float]:
                answer = prometheus.query(cluster.cpu_query)["data"]["result"]
                cpu = {r["metric"]["node"]: float(r["value"][1]) for r in answer}
                return {n: cpu[n] for n in nodes if n in cpu}

            descheduler = LowNodeUtilization(kube, ns, measured)
            task = asyncio.create_task(descheduler.run())
        await asyncio.sleep(duration)
        driver.measuring = False
        if real is not None:
            evictions = await real.stop()
            if not evictions:  # say why, from its own words
                log.warning("the descheduler evicted nothing; its log ends: %s", real.log())
        elif descheduler is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            evictions = descheduler.evictions
        elif name == "loadwise-rebalance":
            path = f"{POLICIES}/{label}"
            await kube.merge_patch(path, {"spec": {"rebalance": {"enabled": False}}})
            evictions = await ledger(
                kube, config.election.lease_namespace, f"{config.election.lease_name}-rebalance"
            )
        else:
            evictions = []
        lost = await settle(kube, ns, plan)
    row = drift.outcome(driver.world, evictions, lost, cool_down=1800)
    await cleanup(cluster, kube, ns, nodes, label)
    return row, driver.world.series, start


async def place_as_planned(kube: Kube, ns: str, plan: drift.Scenario, nodes: list[str]) -> None:
    """Bind every workload's first pods where the scenario says, before any scheduler runs,
    so the three runs start from one placement (what differs is what happens after the
    drift)."""
    wanted = {w.name: w.replicas for w in plan.workloads}

    async def created() -> dict[str, list[dict[str, Any]]] | None:
        pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
        by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            by_job.setdefault(pod["metadata"]["labels"]["job"], []).append(pod)
        if all(len(by_job.get(job, ())) >= n for job, n in wanted.items()):
            return by_job
        return None

    by_job = await wait_for(created, 60, interval=0.5, what="the ReplicaSets' pods created")
    for workload, spots in zip(plan.workloads, plan.placement, strict=True):
        pods = sorted(by_job[workload.name], key=lambda p: p["metadata"]["name"])
        for pod, spot in zip(pods, spots, strict=False):
            name = pod["metadata"]["name"]
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[spot]},
            }
            await kube.create(f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)


def start_kube_scheduler(cluster: LocalCluster) -> None:
    if "kube-scheduler" not in cluster.cp.processes:
        cluster.cp.start_scheduler()


async def ledger(kube: Kube, namespace: str, name: str) -> list[drift.Eviction]:
    try:
        saved = await kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except KubeError as exc:
        if exc.status == 404:
            return []
        raise
    records = json.loads(saved["data"]["moves.json"])
    return [
        drift.Eviction(r["uid"], r["owner"]["uid"], r["owner"]["name"], r["source"], r["at"])
        for r in records
        if r["state"] == "evicted"
    ]


async def settle(kube: Kube, ns: str, plan: drift.Scenario, timeout: float = 60) -> int:
    """Workloads still short of ready replicas after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        sets = await kube.list(f"/apis/apps/v1/namespaces/{ns}/replicasets")
        short = sum(
            (s.get("status") or {}).get("readyReplicas", 0) < s["spec"]["replicas"] for s in sets
        )
        if not short or time.monotonic() > deadline:
            return int(short)
        await asyncio.sleep(1)


async def cleanup(cluster: LocalCluster, kube: Kube, ns: str, nodes: list[str], label: str) -> None:
    with contextlib.suppress(KubeError):
        await kube.delete(f"{POLICIES}/{label}")
    for rs in await kube.list(f"/apis/apps/v1/namespaces/{ns}/replicasets"):
        await kube.delete(f"/apis/apps/v1/namespaces/{ns}/replicasets/{rs['metadata']['name']}")
    for pod in await kube.list(f"/api/v1/namespaces/{ns}/pods"):
        with contextlib.suppress(KubeError):  # KWOK finishes the deletion, as a kubelet does
            await kube.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")

    async def gone() -> bool:
        return not await kube.list(f"/api/v1/namespaces/{ns}/pods")

    await wait_for(gone, 120, interval=0.5, what=f"the pods of {ns} gone")
    await kube.delete(f"/api/v1/namespaces/{ns}")
    for node in nodes:
        await cluster.remove_node(kube, node)
    if cluster.usage is not None:
        # KWOK may go on serving pods it missed the deletion of (Kwok.restart says why).
        assert cluster.kwok is not None
        await asyncio.to_thread(cluster.kwok.restart)


async def run_all(
    cluster: LocalCluster, seed: int, nodes: int, workloads: int, duration: float, runs: list[str]
) -> dict[str, Any]:
    plan = drift.scenario(seed, nodes, workloads)
    kube = cluster.kube()
    try:
        await cluster.install_crd(kube)
        high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "rb-high"}, "value": 1000}  # fmt: skip
        await ignore_exists(kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", high))
        results: dict[str, Any] = {}
        series: dict[str, Any] = {}
        for index, name in enumerate(runs):
            row, per_node, start = await one_run(cluster, kube, plan, name, index, duration)
            results[name] = row
            series[name] = {
                node: [(round(t - start, 1), round(cpu, 3)) for t, cpu in points]
                for node, points in per_node.items()
            }
            print(f"{name}: {row}", flush=True)
    finally:
        await kube.close()
    return {
        "seed": seed,
        "nodes": nodes,
        "workloads": [w.__dict__ for w in plan.workloads],
        "backgrounds": plan.backgrounds,
        "duration": duration,
        "limits": LIMITS,
        "runs": results,
        "series": series,
    }


def table(data: dict[str, Any]) -> str:
    runs = data["runs"]
    header = f"{'run':<20}" + "".join(f"{title:>14}" for _, title, _ in COLUMNS)
    lines = [header]
    for name, row in runs.items():
        cells = "".join(f"{fmt.format(row[key]):>14}" for key, _, fmt in COLUMNS)
        lines.append(f"{name:<20}{cells}")
    for name, row in runs.items():
        if row.get("harness_errors"):  # a suspect row: say so beside it
            lines.append(f"{name}: {row['harness_errors']} harness errors (lists, patches failed)")
    base = runs.get("loadwise", {}).get("hot_node_seconds")
    moved = runs.get("loadwise-rebalance", {}).get("hot_node_seconds")
    if base and moved is not None:
        lines.append(f"hot node-s with rebalancing / without: {moved / base:.2f} (target <= 0.20)")
    real = runs.get("descheduler")
    if real is not None and moved is not None:
        ours, theirs = runs["loadwise-rebalance"], real
        lines.append(
            f"loadwise vs the descheduler: hot node-s {moved:.0f} / "
            f"{theirs['hot_node_seconds']:.0f}, evictions {ours['evictions']} / "
            f"{theirs['evictions']} (never worse: at most theirs on both)"
        )
    return "\n".join(lines)


def chart(data: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = data["series"]
    fig, axes = plt.subplots(len(series), 1, figsize=(9, 2.6 * len(series)), sharex=True)
    axes = axes if len(series) > 1 else [axes]
    for axis, (name, per_node) in zip(axes, series.items(), strict=True):
        for node, points in sorted(per_node.items()):
            axis.plot([t for t, _ in points], [c * 100 for _, c in points], lw=1, label=node)
        axis.axhline(drift.HOT_CPU * 100, color="red", ls="--", lw=0.8)
        axis.set_ylabel("CPU %")
        row = data["runs"][name]
        axis.set_title(
            f"{name}: {row['hot_node_seconds']:.0f} hot node-s, {row['evictions']} evictions"
        )
    axes[-1].set_xlabel(f"seconds since the drift began (seed {data['seed']})")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--workloads", type=int, default=8)
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument(
        "--usage",
        choices=("kwok", "exporter"),
        default="kwok",
        help="where simulated usage comes from (default: KWOK's usage annotations)",
    )
    parser.add_argument("--verbose", action="store_true", help="log loadwise's decisions")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--png", dest="png_path")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.verbose:
        logging.getLogger("loadwise.scheduler").setLevel(logging.INFO)
    runs = [r for r in args.runs.split(",") if r]
    unknown = set(runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown runs {sorted(unknown)}: choose from {', '.join(RUNS)}")
    cluster = LocalCluster(kwok=True, kwok_usage=args.usage == "kwok").start()
    try:
        data = asyncio.run(
            run_all(cluster, args.seed, args.nodes, args.workloads, args.duration, runs)
        )
    finally:
        cluster.stop()
    data["usage"] = args.usage
    print(table(data))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1))
    if args.png_path:
        chart(data, args.png_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
