"""A bound on bench/gang's time to run a group, from a run's JSON: its groups, in arrival order,
on a fleet of one pool of cores (no node boundaries, no metrics, no scheduler latency), each
started as soon as its requests fit (later groups may pass one that does not fit: backfill),
running from then until START + its runtime. Printed: to run p50 and p90 for the whole fleet's
cores and for the cores of the nodes whose background is not busy (base below 50%).

python3 fluid.py RUN.json
"""

from __future__ import annotations

import heapq
import json
import math
import sys
from typing import Any

START = 5.5  # seconds from bound to running: KWOK's 1-6 s start for the last of many members
STEP = 0.1


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def simulate(plans: list[dict[str, Any]], cores: float) -> tuple[float, float]:
    pending = sorted(plans, key=lambda p: p["arrival"])
    waiting: list[dict[str, Any]] = []
    running: list[tuple[float, float]] = []  # (ends, cores)
    free, now, to_run = cores, 0.0, []
    while len(to_run) < len(plans):
        while pending and pending[0]["arrival"] <= now:
            waiting.append(pending.pop(0))
        while running and running[0][0] <= now:
            free += heapq.heappop(running)[1]
        for plan in list(waiting):
            need = plan["cpu_m"] / 1000
            if need <= free:
                free -= need
                waiting.remove(plan)
                to_run.append(now - plan["arrival"] + START)
                heapq.heappush(running, (now + START + plan["runtime"], need))
        now += STEP
    return percentile(to_run, 0.5), percentile(to_run, 0.9)


def main() -> None:
    with open(sys.argv[1]) as file:
        data = json.load(file)
    nodes = data["node_plans"]
    for name, cores in (
        ("all nodes", sum(n["cores"] for n in nodes)),
        ("not busy", sum(n["cores"] for n in nodes if n["base"] < 0.5)),
    ):
        p50, p90 = simulate(data["group_plans"], cores)
        print(
            f"seed {data['seed']} {name} ({cores} cores): to run p50 {p50:.1f} s, p90 {p90:.1f} s"
        )


if __name__ == "__main__":
    main()
