"""Gangs under pressure: Spark-like pod groups, loadwise vs kube-scheduler with gang scheduling.

bench/gang [--nodes N] [--groups G] [--seed S] [--schedulers loadwise,kube-scheduler]
           [--duration SECONDS] [--runtime SECONDS] [--preroll SECONDS] [--history PODS]
           [--tenants T] [--min-share F]
           [--policy JSON] [--quick] [--verbose] [--json PATH]
Sets up its own control plane (GenericWorkload on: kube-scheduler places `default-scheduler`
pods naming a PodGroup as one gang), Prometheus and a KWOK fleet whose usage KWOK serves
(kwok_usage.py), and tears them down. Each scheduler in turn (loadwise in this process, as
bench/placement runs it; kube-scheduler v1.37 as its own process) gets the same groups, the same
arrivals and the same background drift, for the same --duration; between runs every pod and
PodGroup of the tenants goes and the backgrounds start over.

The world (engines/gang.py says it in full): N nodes of 4-8 cores, a fifth of them busy with
background load that drifts across the hot threshold; groups of one driver and 4-32 executors
in T tenants' namespaces, minCount all members (--min-share: the driver and that share of the
executors), as many as make the fleet's CPU hold about 60% of them at once (--groups: that many
instead; the fit share is printed), arriving twice as fast as the fleet could run them; each
runs --runtime seconds on average (0.6-1.4 times) once its minimum runs, then is deleted.

Columns: placed (groups whose minimum was bound, of all); groups/s (placed over the time to
the last placement, or over the whole run when some were never placed); to run p50/p90
(seconds from a group's last member created to its minimum running, KWOK's 1-6 s start
included); partial group-s, partial max (groups with some but not all of their minimum bound
for over a second: their seconds, the most at once; target 0); deadlocks (groups partial for
30 s or more; target 0); hot node-s (node-seconds above 80% CPU by the ground truth; target:
loadwise at most half of kube-scheduler's); by pods (of those, the node-seconds the background
alone would not have been hot); cpu mean (the fleet's mean CPU).
Before each scheduler's run the backgrounds drift for --preroll seconds (default 120): a
busy node has swung before the groups come, as on a real cluster (before 2026-11-30 there was
no such prelude: every node had been flat for minutes at its value at 0; --preroll 0 gives
that world). During it each tenant's last job runs, --history executors (default 8, drawn as
the groups' are, no PodGroup), deleted 20 s before the groups come: a tenant has run jobs
before (before 2026-11-30 every tenant was new at time 0; --history 0 gives that world).
--quick: 12 nodes, runtime 12 s, duration 60 s: a smoke run (about 2.5 minutes on two cores;
the defaults about 8). --policy: loadwise's SchedulingPolicy spec (default: its built-in one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from loadwise_dev.cluster import LocalCluster
from loadwise_dev.engines import gang

COLUMNS = (
    ("placed", "placed", "{}"),
    ("groups_per_s", "groups/s", "{:.2f}"),
    ("to_run_p50_s", "to run p50", "{:.1f}"),
    ("to_run_p90_s", "to run p90", "{:.1f}"),
    ("partial_group_s", "partial grp-s", "{:.1f}"),
    ("partial_max", "partial max", "{}"),
    ("deadlocks", "deadlocks", "{}"),
    ("hot_node_s", "hot node-s", "{:.0f}"),
    ("pods_hot_node_s", "by pods", "{:.0f}"),
    ("cpu_mean", "cpu mean", "{:.0%}"),
)
QUICK = {"nodes": 12, "runtime": 12.0, "duration": 60.0}
DEFAULTS = {"nodes": 50, "runtime": 25.0, "duration": 110.0}


def cell(value: object, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(data: dict[str, Any]) -> str:
    runs = data["schedulers"]
    width = max(16, *(len(name) + 2 for name in runs))
    lines = [
        f"{data['groups']} groups ({data['pods']} pods) on {data['nodes']} nodes"
        f" ({data['cores']} cores, room for {data['fit_share']:.0%} of the groups' requests at"
        f" once), arriving over {data['arrival_window_s']:.0f} s; {data['duration_s']:.0f} s"
        f" per scheduler, seed {data['seed']}",
        f"{'scheduler':<{width}}" + "".join(f"{title:>14}" for _, title, _ in COLUMNS),
    ]
    for name, row in runs.items():
        cells = "".join(
            f"{cell(row['placed'], fmt) + '/' + str(row['groups']):>14}"
            if key == "placed"
            else f"{cell(row.get(key), fmt):>14}"
            for key, _, fmt in COLUMNS
        )
        lines.append(f"{name:<{width}}{cells}")
    for name, row in runs.items():
        lines.append(
            f"{name}: background alone hot {row['background_hot_node_s']:.0f} node-s;"
            f" to bound p50 {cell(row['to_bound_p50_s'], '{:.2f}')} s,"
            f" p90 {cell(row['to_bound_p90_s'], '{:.2f}')} s;"
            f" longest bind spread {cell(row['bind_spread_max_s'], '{:.3f}')} s"
            + (f"; {row['harness_errors']} harness errors" if row.get("harness_errors") else "")
        )
    counts = runs.get("loadwise", {}).get("loadwise")
    if counts:
        placed = counts.get("placements_by_metrics", 0) + counts.get("placements_by_requests", 0)
        lines.append(
            f"loadwise's own counts: {placed:.0f} member placements"
            f" ({counts.get('placements_by_requests', 0):.0f} on requests alone),"
            f" {counts.get('all_hot', 0):.0f} with every feasible node hot (least loaded taken),"
            f" {counts.get('hot_passed_over', 0):.0f} hot nodes passed over; group decisions:"
            f" {counts.get('group_decisions_placed', 0):.0f} placed,"
            f" {counts.get('group_decisions_unschedulable', 0):.0f} unschedulable"
        )
    ours, theirs = runs.get("loadwise"), runs.get("kube-scheduler")
    if ours and theirs:
        lines.append(
            "hot node-s loadwise / kube-scheduler: "
            f"{ratio(ours['hot_node_s'], theirs['hot_node_s'])} (target <= 0.50);"
            f" by pods: {ratio(ours['pods_hot_node_s'], theirs['pods_hot_node_s'])};"
            f" groups/s: {ratio(ours['groups_per_s'], theirs['groups_per_s'])}"
        )
    return "\n".join(lines)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--groups", type=int, help="default: room for about 60%% at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schedulers", default="loadwise,kube-scheduler")
    parser.add_argument("--duration", type=float, help="seconds per scheduler (default 110)")
    parser.add_argument("--runtime", type=float, help="a group's mean runtime (default 25)")
    parser.add_argument(
        "--preroll",
        type=float,
        default=gang.PREROLL,
        help="seconds the backgrounds drift before the groups come (default %(default)s)",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=gang.HISTORY,
        help="pods of each tenant's last job, run in the prelude (default %(default)s)",
    )
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--min-share", type=float, default=1.0)
    parser.add_argument(
        "--policy",
        type=json.loads,
        help="loadwise's SchedulingPolicy spec as JSON, e.g. '{\"placementEstimate\": 1}'"
        " (default: none, its built-in defaults)",
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--verbose", action="store_true", help="log loadwise's decisions")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    preset = QUICK if args.quick else DEFAULTS
    nodes = args.nodes or int(preset["nodes"])
    runtime = args.runtime or preset["runtime"]
    duration = args.duration or preset["duration"]
    schedulers = [s for s in args.schedulers.split(",") if s]
    unknown = set(schedulers) - set(gang.SCHEDULERS)
    if unknown:
        parser.error(f"unknown schedulers {sorted(unknown)}: choose from loadwise, kube-scheduler")
    if not 0 <= args.min_share <= 1:
        parser.error("--min-share is a share of the executors, 0 to 1")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.verbose:
        logging.getLogger("loadwise.scheduler").setLevel(logging.INFO)
    scenario = gang.make_scenario(
        args.seed, nodes, args.groups, runtime, args.tenants, args.min_share
    )
    began = time.monotonic()
    cluster = LocalCluster(kwok=True, kwok_usage=True).start()
    try:
        results = asyncio.run(
            gang.run_all(
                cluster, scenario, schedulers, duration, args.policy, args.preroll, args.history
            )
        )
    finally:
        cluster.stop()
    data = gang.as_json(scenario, results, duration, runtime)
    data["policy"] = args.policy
    data["preroll_s"] = args.preroll
    data["history_pods"] = args.history
    data["wall_s"] = round(time.monotonic() - began, 1)
    print(table(data))
    print(f"wall time {data['wall_s']:.0f} s")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
