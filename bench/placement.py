"""Placement quality under a burst: loadwise vs kube-scheduler vs the naive scorer.

bench/placement [--nodes N] [--pods M] [--seed S] [--json PATH] [--png PATH]
Sets up its own control plane, Prometheus and nodes, and tears them down.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path

from loadwise_dev import placement
from loadwise_dev.cluster import LocalCluster

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
)


def table(data: dict[str, object]) -> str:
    schedulers = data["schedulers"]
    assert isinstance(schedulers, dict)
    header = f"{'scheduler':<15}" + "".join(f"{title:>15}" for _, title, _ in COLUMNS)
    lines = [header]
    for name, outcome in schedulers.items():
        cells = "".join(f"{fmt.format(outcome[key]):>15}" for key, _, fmt in COLUMNS)
        lines.append(f"{name:<15}{cells}")
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
    axes[0].set_ylabel("node CPU utilisation after the burst (%)")
    axes[1].set_ylabel("pods placed on the node")
    axes[1].set_xlabel("nodes, ordered by CPU utilisation before the burst")
    axes[0].legend(loc="upper left")
    axes[0].set_title(f"{data['pods']} pods onto {data['nodes']} nodes (seed {data['seed']})")
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cluster = LocalCluster().start()
    try:
        results = asyncio.run(placement.run(cluster, args.nodes, args.pods, args.seed))
    finally:
        cluster.stop()
    data = placement.as_json(results, args.nodes, args.pods, args.seed)
    print(table(data))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1))
    if args.png_path:
        chart(data, args.png_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
