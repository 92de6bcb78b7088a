"""Placement quality under a burst: loadwise vs kube-scheduler vs the naive scorer.

bench/placement [--nodes N] [--pods M] [--seed S] [--policy default|cpu|pack]
                [--scenario burst|workload-mix|gpu] [--schedulers a,b] [--no-kwok]
                [--usage kwok|exporter] [--json PATH] [--png PATH]
Sets up its own control plane, Prometheus and nodes, and tears them down. KWOK plays the
nodes' kubelets (Leases, pods Running, graceful deletions); --no-kwok: the nodes are API objects
only (as before 2026-11-26: the same figures within run-to-run noise,
bench/results/2026-11-26/README.md).
Usage is what each pod declares, and a node's background; --usage kwok (the default on KWOK):
KWOK serves it as the kubelet's cAdvisor series, read with kube-prometheus-stack's preset
queries (kwok_usage.py; a background is a pod); --usage exporter: the harness's exporter
publishes node-exporter-shaped series (the only choice with --no-kwok). GPU utilisation comes
from the exporter either way (KWOK simulates no GPU).
--policy: loadwise's SchedulingPolicy (default {}; cpu: weights cpu 1, memory 0; pack: Pack to
70% cpu / 80% memory). --scenario workload-mix: pods of idle and hungry workloads, some placed
first as history; loadwise with and without its learned estimate, and kube-scheduler.
--scenario gpu: the burst, with 30% of nodes publishing GPU utilisation through Prometheus (a
third of them above 90%); loadwise adds the gpu dimension (weight 1, hot above 90%) to --policy.
gpu hot pods: burst pods placed on a node above 90% GPU (a column in the gpu scenario only).
vs optimum: CPU stddev over the clairvoyant water-fill optimum's (1.00 is as even as possible).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path

from loadwise_dev.cluster import LocalCluster
from loadwise_dev.engines import placement

COLUMNS = (
    ("new_hot_nodes", "new hot", "{}"),
    ("hot_nodes", "hot", "{}"),
    ("cpu_util_max", "cpu max", "{:.0%}"),
    ("cpu_util_stddev", "cpu sd", "{:.3f}"),
    ("mem_util_max", "mem max", "{:.0%}"),
    ("mem_util_stddev", "mem sd", "{:.3f}"),
    ("max_pods_per_node", "max pods/node", "{}"),
    ("fair_share", "fair share", "{}"),
    ("unschedulable", "unschedulable", "{}"),
    ("seconds", "burst s", "{}"),
    ("nodes_used", "nodes used", "{}"),
    ("nodes_empty", "nodes empty", "{}"),
    ("idle_left", "idle left", "{}"),
    ("vs_optimum", "vs optimum", "{:.2f}"),
)
GPU_COLUMNS = (("gpu_hot_pods", "gpu hot pods", "{}"),)  # shown in the gpu scenario only


def cell(value: object, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(data: dict[str, object]) -> str:
    schedulers = data["schedulers"]
    assert isinstance(schedulers, dict)
    width = max(15, *(len(name) + 2 for name in schedulers))
    columns = COLUMNS + (GPU_COLUMNS if data.get("scenario") == "gpu" else ())
    header = f"{'scheduler':<{width}}" + "".join(f"{title:>15}" for _, title, _ in columns)
    lines = [header]
    for name, outcome in schedulers.items():
        cells = "".join(f"{cell(outcome.get(key), fmt):>15}" for key, _, fmt in columns)
        lines.append(f"{name:<{width}}{cells}")
    if "optimum_cpu_stddev" in data:
        lines.append(
            f"optimum (water-fill): cpu sd {data['optimum_cpu_stddev']:.3f},"
            f" level {data['optimum_cpu_level']:.0%}"
        )
    if "gpu_nodes" in data:
        lines.append(
            f"gpu: {data['gpu_nodes']} GPU nodes, {data['gpu_hot_nodes']} above"
            f" {data['gpu_hot_threshold']:.0%}"
        )
    return "\n".join(lines)


def chart(data: dict[str, object], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schedulers = data["schedulers"]
    assert isinstance(schedulers, dict)
    first = next(iter(schedulers.values()))["per_node"]
    order = sorted(first, key=lambda n: first[n]["cpu_before"])
    fig, axes = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    axes[0].plot([first[n]["cpu_before"] * 100 for n in order], "k--", label="before the burst")
    for name, outcome in schedulers.items():
        per_node = outcome["per_node"]
        axes[0].plot([per_node[n]["cpu"] * 100 for n in order], marker=".", ls="", label=name)
        axes[1].plot([per_node[n]["pods"] for n in order], marker=".", ls="", label=name)
    axes[0].axhline(placement.HOT * 100, color="red", lw=0.8, label="hot threshold")
    if "optimum_cpu_level" in data:
        level = data["optimum_cpu_level"]
        assert isinstance(level, float)
        axes[0].axhline(level * 100, color="grey", lw=0.8, ls=":", label="water-fill level")
    axes[0].set_ylabel("node CPU utilisation after the burst (%)")
    axes[1].set_ylabel("pods placed on the node")
    axes[1].set_xlabel("nodes, ordered by CPU utilisation before the burst")
    axes[0].legend(loc="upper left")
    title = f"{data['pods']} pods onto {data['nodes']} nodes (seed {data['seed']})"
    extras = [
        f"{key} {data[key]}"
        for key, usual in (("scenario", "burst"), ("policy", "default"))
        if data.get(key, usual) != usual
    ]
    axes[0].set_title(", ".join([title, *extras]))
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--png", dest="png_path")
    parser.add_argument("--policy", choices=sorted(placement.POLICY_SPECS), default="default")
    parser.add_argument("--scenario", choices=placement.SCENARIOS, default="burst")
    parser.add_argument(
        "--schedulers",
        help="comma-separated subset to run (default: all of the scenario's), e.g. loadwise",
    )
    parser.add_argument(
        "--kwok",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="KWOK runs the nodes (the default); --no-kwok: API objects only",
    )
    parser.add_argument(
        "--usage",
        choices=("kwok", "exporter"),
        help="where simulated usage comes from (default: kwok on KWOK nodes, else exporter)",
    )
    args = parser.parse_args()
    usage = args.usage or ("kwok" if args.kwok else "exporter")
    if usage == "kwok" and not args.kwok:
        parser.error("--usage kwok needs KWOK nodes (drop --no-kwok)")
    logging.basicConfig(level=logging.WARNING)
    cluster = LocalCluster(kwok=args.kwok, kwok_usage=usage == "kwok").start()
    try:
        scenario, results, optimum = asyncio.run(
            placement.run_scenario(
                cluster,
                args.nodes,
                args.pods,
                args.seed,
                schedulers=args.schedulers.split(",") if args.schedulers else None,
                policy=args.policy,
                scenario_name=args.scenario,
            )
        )
    finally:
        cluster.stop()
    data = placement.as_json(
        results, args.nodes, args.pods, args.seed, args.policy, scenario, optimum
    )
    data["fleet"] = "kwok" if args.kwok else "api-objects"
    data["usage"] = usage
    print(table(data))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1))
    if args.png_path:
        chart(data, args.png_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
